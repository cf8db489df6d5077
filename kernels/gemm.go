package kernels

import (
	"math"
	"sync"
)

// The packed GEMM follows the Goto/BLIS structure: C is cut into gemmNC-wide column blocks,
// K into gemmKC-deep slices, and for each (column block, slice) B is packed once into
// nr-wide panels; then each gemmMC-high row block of A is packed (scaled by alpha) into mr-high
// panels, and a micro-kernel adds one mr×nr tile of the product into C per call (mr×nr is
// 6×16 for the portable and AVX2 kernels, 8×32 for AVX-512). Threads split the column panels of one row block, so they share the packed A and B.
const (
	gemmKC    = 256
	gemmMC    = 96   // multiple of every kernel's mr
	gemmNC    = 2048 // multiple of every kernel's nr
	gemmMaxMR = 8
	gemmMaxNR = 32
)

// microKernel adds Σ_p a[p·mr+i]·b[p·nr+j] to c[i·ldc+j] for i < mr, j < nr, p < kc, or,
// when load is false, stores the sum there without reading c.
type microKernel struct {
	mr, nr int
	fn     func(kc int, a, b, c []float32, ldc int, load bool)
	// gather, when not nil, packs sixteen rows of a transposed operand with the CPU's gather
	// instruction (see gatherColumns16); nil leaves it to interleave's loads.
	gather func(pan, src []float32, off, ld, kc, width int)
}

// gemmWork is one thread's packing buffers, grown on first use and kept.
type gemmWork struct {
	a     []float32
	b     []float32
	tile  [gemmMaxMR * gemmMaxNR]float32
	dense denseB // the packers, kept here so that passing them as interfaces allocates nothing
	conv  convB
}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// gemmPacked computes c = alpha·op(a)·op(b) + beta·c using len(work) threads.
func gemmPacked(kern microKernel, work []*gemmWork, transA, transB bool, m, n, k int, alpha float32, a, b []float32, beta float32, c []float32) {
	w := work[0]
	w.dense = denseB{b: b, trans: transB, n: n, k: k, gather: kern.gather}
	gemmPackedB(kern, work, transA, m, n, k, alpha, a, nil, &w.dense, beta, c)
}

// bPacker packs op(B)[pc:pc+kc, jc:jc+nc] into nR-wide panels (see packB). Besides a stored
// matrix, op(B) may be an implicit im2col matrix that is never written out (convB).
type bPacker interface {
	packB(dst []float32, jc, nc, pc, kc, nR int)
}

// denseB is a stored row-major B (n×k when trans, else k×n).
type denseB struct {
	b      []float32
	trans  bool
	n, k   int
	gather func(pan, src []float32, off, ld, kc, width int) // the kernel's, may be nil
}

func (p *denseB) packB(dst []float32, jc, nc, pc, kc, nR int) {
	packB(dst, p.b, p.trans, p.n, p.k, jc, nc, pc, kc, nR, p.gather)
}

// prepackedALen is the length prepackA needs for an m×k op(A).
func prepackedALen(kern microKernel, m, k int) int {
	return (m + kern.mr - 1) / kern.mr * kern.mr * k
}

// prepackA packs all of alpha·op(A) the way gemmPackedB would, block by block, so that a GEMM
// repeated with the same A (a convolution's weights, once per sample) packs it once. The
// block for K slice pc and row block ic starts at pc·mPad + ic·kc, mPad = m rounded up to mr.
func prepackA(kern microKernel, dst, a []float32, transA bool, m, k int, alpha float32) {
	mPad := (m + kern.mr - 1) / kern.mr * kern.mr
	for pc := 0; pc < k; pc += gemmKC {
		kc := min(gemmKC, k-pc)
		for ic := 0; ic < m; ic += gemmMC {
			packA(dst[pc*mPad+ic*kc:], a, transA, m, k, ic, min(gemmMC, m-ic), pc, kc, alpha, kern.mr)
		}
	}
}

// gemmPackedB is gemmPacked with op(B) given by a packer and, when ap is not nil, A already
// packed by prepackA (then a, transA and alpha are not used: alpha was applied when packing).
func gemmPackedB(kern microKernel, work []*gemmWork, transA bool, m, n, k int, alpha float32, a, ap []float32, b bPacker, beta float32, c []float32) {
	c = c[:m*n]
	// With beta = 0 the first K slice stores its tiles instead of adding them, so c is
	// neither cleared first nor read.
	overwrite := beta == 0 && alpha != 0 && k > 0
	switch {
	case overwrite, beta == 1:
	case beta == 0:
		clear(c)
	default:
		for i := range c {
			c[i] *= beta
		}
	}
	if alpha == 0 || k == 0 {
		return
	}
	w0 := work[0]
	for jc := 0; jc < n; jc += gemmNC {
		nc := min(gemmNC, n-jc)
		panels := (nc + kern.nr - 1) / kern.nr
		for pc := 0; pc < k; pc += gemmKC {
			kc := min(gemmKC, k-pc)
			load := !overwrite || pc > 0
			w0.b = grow(w0.b, panels*kern.nr*kc)
			b.packB(w0.b, jc, nc, pc, kc, kern.nr)
			for ic := 0; ic < m; ic += gemmMC {
				mc := min(gemmMC, m-ic)
				var apBlock []float32
				if ap != nil {
					mPad := (m + kern.mr - 1) / kern.mr * kern.mr
					apBlock = ap[pc*mPad+ic*kc:]
				} else {
					w0.a = grow(w0.a, ((mc+kern.mr-1)/kern.mr)*kern.mr*kc)
					packA(w0.a, a, transA, m, k, ic, mc, pc, kc, alpha, kern.mr)
					apBlock = w0.a
				}
				if len(work) == 1 || panels < 2 {
					gemmBlock(kern, w0, apBlock, w0.b, c, n, ic, mc, jc, nc, kc, 0, panels, load)
					continue
				}
				gemmParallel(kern, work, apBlock, w0.b, c, n, ic, mc, jc, nc, kc, panels, load)
			}
		}
	}
}

// gemmParallel splits the column panels of one packed block over the threads of work. It is
// a function of its own so that the closure's captures escape only on this path.
func gemmParallel(kern microKernel, work []*gemmWork, ap, bp, c []float32, ldc, ic, mc, jc, nc, kc, panels int, load bool) {
	threads := min(len(work), panels)
	var wg sync.WaitGroup
	for t := 0; t < threads; t++ {
		lo, hi := t*panels/threads, (t+1)*panels/threads
		wg.Add(1)
		go func() {
			defer wg.Done()
			gemmBlock(kern, work[t], ap, bp, c, ldc, ic, mc, jc, nc, kc, lo, hi, load)
		}()
	}
	wg.Wait()
}

// gemmBlock multiplies the packed row block (mc×kc) by column panels [plo, phi) of the packed
// slice of B and adds the result into c (stores it, when load is false).
func gemmBlock(kern microKernel, w *gemmWork, ap, bp, c []float32, ldc, ic, mc, jc, nc, kc, plo, phi int, load bool) {
	mR, nR := kern.mr, kern.nr
	for jp := plo; jp < phi; jp++ {
		jr := jp * nR
		nr := min(nR, nc-jr)
		bpan := bp[jp*nR*kc : (jp+1)*nR*kc]
		for ir := 0; ir < mc; ir += mR {
			mr := min(mR, mc-ir)
			apan := ap[(ir/mR)*mR*kc : (ir/mR+1)*mR*kc]
			off := (ic+ir)*ldc + jc + jr
			if mr == mR && nr == nR {
				kern.fn(kc, apan, bpan, c[off:], ldc, load)
				continue
			}
			t := w.tile[:mR*nR]
			kern.fn(kc, apan, bpan, t, nR, false)
			for i := 0; i < mr; i++ {
				row := c[off+i*ldc : off+i*ldc+nr]
				if !load {
					copy(row, t[i*nR:i*nR+nr])
					continue
				}
				for j := range row {
					row[j] += t[i*nR+j]
				}
			}
		}
	}
}

// packA copies alpha·op(A)[ic:ic+mc, pc:pc+kc] into mR-high panels, each stored k-major
// (mR values per k), zero-padding the last panel. Loops follow A's storage order.
func packA(dst, a []float32, trans bool, m, k, ic, mc, pc, kc int, alpha float32, mR int) {
	for ir := 0; ir < mc; ir += mR {
		mr := min(mR, mc-ir)
		pan := dst[(ir/mR)*mR*kc : (ir/mR+1)*mR*kc]
		if trans {
			for kk := 0; kk < kc; kk++ {
				src := a[(pc+kk)*m+ic+ir : (pc+kk)*m+ic+ir+mr]
				d := pan[kk*mR : kk*mR+mR]
				for i, v := range src {
					d[i] = alpha * v
				}
				for i := mr; i < mR; i++ {
					d[i] = 0
				}
			}
			continue
		}
		interleave(pan, a, (ic+ir)*k+pc, k, 0, mr, mR, kc, alpha)
	}
}

// packB copies op(B)[pc:pc+kc, jc:jc+nc] into nR-wide panels, each stored k-major (nR values
// per k), zero-padding the last panel. Loops follow B's storage order; a transposed B goes
// sixteen rows at a time through gather when it is not nil.
func packB(dst, b []float32, trans bool, n, k, jc, nc, pc, kc, nR int, gather func(pan, src []float32, off, ld, kc, width int)) {
	for jr := 0; jr < nc; jr += nR {
		nr := min(nR, nc-jr)
		pan := dst[(jr/nR)*nR*kc : (jr/nR+1)*nR*kc]
		if trans {
			r := 0
			if gather != nil && k <= math.MaxInt32/16 {
				for ; r+16 <= nr; r += 16 {
					gather(pan[r:], b, (jc+jr+r)*k+pc, k, kc, nR)
				}
			}
			interleave(pan, b, (jc+jr)*k+pc, k, r, nr, nR, kc, 1)
			continue
		}
		for kk := 0; kk < kc; kk++ {
			o := (pc+kk)*n + jc + jr
			d := pan[kk*nR : kk*nR+nR]
			switch {
			case nr == 32 && nR == 32:
				*(*[32]float32)(d) = *(*[32]float32)(b[o : o+32])
			case nr == 16 && nR == 16:
				*(*[16]float32)(d) = *(*[16]float32)(b[o : o+16])
			default:
				copy(d, b[o:o+nr])
				clear(d[nr:])
			}
		}
	}
}

// interleave writes rows from..rows-1 of src (row r starts at off+r·ld, kc values each),
// scaled by alpha, into pan k-major with stride width: pan[kk·width+r] = alpha·src[off+r·ld+kk].
// Rows rows..width-1 are zero. Four rows go together, so each k writes four adjacent values.
func interleave(pan, src []float32, off, ld, from, rows, width, kc int, alpha float32) {
	r := from
	for ; r+4 <= rows; r += 4 {
		s0 := src[off+r*ld : off+r*ld+kc]
		s1 := src[off+(r+1)*ld : off+(r+1)*ld+kc]
		s2 := src[off+(r+2)*ld : off+(r+2)*ld+kc]
		s3 := src[off+(r+3)*ld : off+(r+3)*ld+kc]
		if alpha == 1 {
			for kk := range s0 {
				d := (*[4]float32)(pan[kk*width+r:])
				d[0], d[1], d[2], d[3] = s0[kk], s1[kk], s2[kk], s3[kk]
			}
			continue
		}
		for kk := range s0 {
			d := (*[4]float32)(pan[kk*width+r:])
			d[0], d[1], d[2], d[3] = alpha*s0[kk], alpha*s1[kk], alpha*s2[kk], alpha*s3[kk]
		}
	}
	for ; r < rows; r++ {
		s := src[off+r*ld : off+r*ld+kc]
		for kk, v := range s {
			pan[kk*width+r] = alpha * v
		}
	}
	for ; r < width; r++ {
		for kk := 0; kk < kc; kk++ {
			pan[kk*width+r] = 0
		}
	}
}

const (
	goMR = 6
	goNR = 16
)

// gemmKernelGo is the portable micro-kernel.
var gemmKernelGo = microKernel{mr: goMR, nr: goNR, fn: gemmKernelGo6x16}

func gemmKernelGo6x16(kc int, a, b, c []float32, ldc int, load bool) {
	var acc [goMR][goNR]float32
	a = a[:kc*goMR]
	b = b[:kc*goNR]
	for p := 0; p < kc; p++ {
		bp := (*[goNR]float32)(b[p*goNR:])
		ap := (*[goMR]float32)(a[p*goMR:])
		for i := 0; i < goMR; i++ {
			ai := ap[i]
			r := &acc[i]
			r[0] += ai * bp[0]
			r[1] += ai * bp[1]
			r[2] += ai * bp[2]
			r[3] += ai * bp[3]
			r[4] += ai * bp[4]
			r[5] += ai * bp[5]
			r[6] += ai * bp[6]
			r[7] += ai * bp[7]
			r[8] += ai * bp[8]
			r[9] += ai * bp[9]
			r[10] += ai * bp[10]
			r[11] += ai * bp[11]
			r[12] += ai * bp[12]
			r[13] += ai * bp[13]
			r[14] += ai * bp[14]
			r[15] += ai * bp[15]
		}
	}
	for i := 0; i < goMR; i++ {
		row := c[i*ldc : i*ldc+goNR]
		if !load {
			copy(row, acc[i][:])
			continue
		}
		for j := range row {
			row[j] += acc[i][j]
		}
	}
}
