//go:build amd64 && !purego

#include "textflag.h"

// The SGD update of SGDStep in SSE registers (part of the amd64 baseline, so no CPU feature
// check): 16 elements per iteration without momentum, 8 with it. Each element goes through the
// same multiplies and adds, in the same order and without fused multiply-adds, as SGDStep's Go
// loop, so both give bitwise-equal results. n is a multiple of 16 (sgdF32) or 8
// (sgdMomentumF32); the Go caller does the tail.

// func sgdF32(param, grad *float32, n int, lr, wd float32)
TEXT ·sgdF32(SB), NOSPLIT, $0-32
	MOVQ  param+0(FP), DI
	MOVQ  grad+8(FP), SI
	MOVQ  n+16(FP), CX
	MOVSS lr+24(FP), X14
	SHUFPS $0, X14, X14
	MOVSS wd+28(FP), X15
	SHUFPS $0, X15, X15
	SHRQ  $4, CX
	JZ    sgddone
sgdloop:
	MOVUPS 0(DI), X0
	MOVUPS 16(DI), X1
	MOVUPS 32(DI), X2
	MOVUPS 48(DI), X3
	// t = wd·p
	MOVAPS X0, X4
	MOVAPS X1, X5
	MOVAPS X2, X6
	MOVAPS X3, X7
	MULPS  X15, X4
	MULPS  X15, X5
	MULPS  X15, X6
	MULPS  X15, X7
	// g' = g + t
	MOVUPS 0(SI), X8
	MOVUPS 16(SI), X9
	MOVUPS 32(SI), X10
	MOVUPS 48(SI), X11
	ADDPS  X4, X8
	ADDPS  X5, X9
	ADDPS  X6, X10
	ADDPS  X7, X11
	// p -= lr·g'
	MULPS  X14, X8
	MULPS  X14, X9
	MULPS  X14, X10
	MULPS  X14, X11
	SUBPS  X8, X0
	SUBPS  X9, X1
	SUBPS  X10, X2
	SUBPS  X11, X3
	MOVUPS X0, 0(DI)
	MOVUPS X1, 16(DI)
	MOVUPS X2, 32(DI)
	MOVUPS X3, 48(DI)
	ADDQ   $64, DI
	ADDQ   $64, SI
	DECQ   CX
	JNZ    sgdloop
sgddone:
	RET

// func sgdMomentumF32(param, grad, velocity *float32, n int, lr, momentum, wd float32)
TEXT ·sgdMomentumF32(SB), NOSPLIT, $0-44
	MOVQ  param+0(FP), DI
	MOVQ  grad+8(FP), SI
	MOVQ  velocity+16(FP), DX
	MOVQ  n+24(FP), CX
	MOVSS lr+32(FP), X13
	SHUFPS $0, X13, X13
	MOVSS momentum+36(FP), X14
	SHUFPS $0, X14, X14
	MOVSS wd+40(FP), X15
	SHUFPS $0, X15, X15
	SHRQ  $3, CX
	JZ    momdone
momloop:
	// Eight elements per iteration: p in X0-X1, g' in X2-X3, v in X4-X5.
	MOVUPS 0(DI), X0
	MOVUPS 16(DI), X1
	MOVAPS X0, X2
	MOVAPS X1, X3
	MULPS  X15, X2
	MULPS  X15, X3
	MOVUPS 0(SI), X6
	MOVUPS 16(SI), X7
	ADDPS  X2, X6
	ADDPS  X3, X7
	// v = momentum·v + g'
	MOVUPS 0(DX), X4
	MOVUPS 16(DX), X5
	MULPS  X14, X4
	MULPS  X14, X5
	ADDPS  X6, X4
	ADDPS  X7, X5
	MOVUPS X4, 0(DX)
	MOVUPS X5, 16(DX)
	// p -= lr·v
	MULPS  X13, X4
	MULPS  X13, X5
	SUBPS  X4, X0
	SUBPS  X5, X1
	MOVUPS X0, 0(DI)
	MOVUPS X1, 16(DI)
	ADDQ   $32, DI
	ADDQ   $32, SI
	ADDQ   $32, DX
	DECQ   CX
	JNZ    momloop
momdone:
	RET
