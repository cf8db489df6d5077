// Package layers holds one test: that the module's import graph follows its layers (the
// table in layers_test.go, the diagram in docs/README.md). A package imports only packages of
// its own layer or of lower ones, so the transport never learns what an allreduce is and the
// library never links the command line or the built-in workload. A new package gets a row in
// the table, or the test fails naming it.
package layers
