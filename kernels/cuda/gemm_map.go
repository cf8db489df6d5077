package cuda

// colMajorGemm is one column-major SGEMM call as cuBLAS (and the emulator) take it:
// C (m×n, leading dimension ldc) = alpha·op(A)·op(B) + beta·C with op(A) m×k and op(B) k×n.
type colMajorGemm struct {
	transA, transB bool
	m, n, k        int
	lda, ldb, ldc  int
}

// rowMajorGemm maps a row-major c = alpha·op(a)·op(b) + beta·c (op(a) m×k, op(b) k×n, c m×n,
// transA meaning a is stored k×m, transB meaning b is stored n×k) onto cuBLAS. A row-major
// matrix read in column order is its transpose, so the call computes cᵀ = op(b)ᵀ·op(a)ᵀ: the
// column-major A operand is the row-major b, and B is a. Leading dimensions are the stored row
// lengths, at least 1 as cuBLAS requires even for empty operands.
func rowMajorGemm(transA, transB bool, m, n, k int) colMajorGemm {
	lda, ldb := k, n // row lengths of a (m×k) and b (k×n) as stored
	if transA {
		lda = m
	}
	if transB {
		ldb = k
	}
	return colMajorGemm{
		transA: transB, transB: transA,
		m: n, n: m, k: k,
		lda: max(1, ldb), ldb: max(1, lda), ldc: max(1, n),
	}
}
