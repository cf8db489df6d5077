// Package compress holds the lossy encodings of float32 vectors that a round may send over a
// thin link: the fp16 and bf16 casts and int8 with one scale per block of values, behind one
// Codec interface, and the error feedback that carries what an encoding lost into the next
// round so that, summed over rounds, nothing is lost.
//
// Every reduction stays in float32: a receiver decodes and adds (DecodeAdd), it never adds
// encoded values. Each codec states its error bound per element (ErrorBound), which is what
// tests and the planner reason with: fp16 rounds to nearest with a relative error of 2^-11
// (2^-25 absolute below fp16's normal range, and values beyond ±65504 become ±Inf), bf16 with
// 2^-8 relative, and int8 with half its block's scale, the block's largest magnitude ÷ 127.
//
// The byte-level casts (Float32ToFP16 and friends) are also the transport's fp16 and bf16
// payload codecs. Vectors are viewed as little-endian bytes, as everything hetsync puts on the
// wire is.
package compress
