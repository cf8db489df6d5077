// Package extend holds tests of hetsync's extension points: an algorithm and a strategy
// defined outside the module's packages.
package extend
