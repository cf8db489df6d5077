//go:build amd64 && !purego

#include "textflag.h"

// ReLU and its derivative as bit operations in SSE2 registers (part of the amd64 baseline, so
// no CPU feature check), exactly the Go loops' operations: a value whose sign bit is set
// becomes +0; a gradient passes where the output, read as an int32, is positive. 16 elements
// per iteration; n is a multiple of 16 and the Go caller does the tail.

// func reluF32(y, x *float32, n int)
TEXT ·reluF32(SB), NOSPLIT, $0-24
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   reludone
reluloop:
	MOVUPS 0(SI), X0
	MOVUPS 16(SI), X1
	MOVUPS 32(SI), X2
	MOVUPS 48(SI), X3
	// mask = x >> 31 (arithmetic): all ones where the sign bit is set; y = x &^ mask.
	MOVAPS X0, X4
	MOVAPS X1, X5
	MOVAPS X2, X6
	MOVAPS X3, X7
	PSRAL  $31, X4
	PSRAL  $31, X5
	PSRAL  $31, X6
	PSRAL  $31, X7
	PANDN  X0, X4
	PANDN  X1, X5
	PANDN  X2, X6
	PANDN  X3, X7
	MOVUPS X4, 0(DI)
	MOVUPS X5, 16(DI)
	MOVUPS X6, 32(DI)
	MOVUPS X7, 48(DI)
	ADDQ   $64, SI
	ADDQ   $64, DI
	DECQ   CX
	JNZ    reluloop
reludone:
	RET

// func reluBackwardF32(dx, dy, y *float32, n int)
TEXT ·reluBackwardF32(SB), NOSPLIT, $0-32
	MOVQ dx+0(FP), DI
	MOVQ dy+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ n+24(FP), CX
	PXOR X15, X15
	SHRQ $4, CX
	JZ   rbdone
rbloop:
	// mask = (int32(y) > 0); dx = dy & mask.
	MOVUPS  0(DX), X0
	MOVUPS  16(DX), X1
	MOVUPS  32(DX), X2
	MOVUPS  48(DX), X3
	PCMPGTL X15, X0
	PCMPGTL X15, X1
	PCMPGTL X15, X2
	PCMPGTL X15, X3
	MOVUPS  0(SI), X4
	MOVUPS  16(SI), X5
	MOVUPS  32(SI), X6
	MOVUPS  48(SI), X7
	PAND    X4, X0
	PAND    X5, X1
	PAND    X6, X2
	PAND    X7, X3
	MOVUPS  X0, 0(DI)
	MOVUPS  X1, 16(DI)
	MOVUPS  X2, 32(DI)
	MOVUPS  X3, 48(DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	ADDQ    $64, DX
	DECQ    CX
	JNZ     rbloop
rbdone:
	RET
