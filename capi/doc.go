// Package main is hetsync's C ABI: built with -buildmode=c-shared into libhetsync.so (`make
// python`), it lets programs in other languages (the Python package under python/ first) form
// a job and run collectives on memory they own. hetsync.h is its contract and docs/python.md
// its guide.
//
// The library is a thin door onto the root package: every decision (how a job forms, which
// algorithm runs, what an error says) stays there. Buffers are the caller's memory, read and
// written in place: the ABI takes C pointers (torch's and numpy's memory is C memory, so the cgo
// pointer rules hold) and never copies or keeps them beyond a call's completion.
//
// It must never: install a signal handler (the Go runtime of a c-shared library installs its
// own only for SIGSEGV, SIGBUS, SIGFPE, SIGPIPE and SIGURG, and forwards the signals it does not
// cause to the program's handlers); keep Go pointers in C memory; or hold a lock of its own
// while a collective waits, so that any thread may wait on, or test, any request.
package main
