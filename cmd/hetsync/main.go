// Command hetsync is hetsync's command line: launch, bench, train, experiment, report and plan
// (package command holds it, so that a program can build its own hetsync with its own
// strategies and algorithms).
package main

import (
	"os"

	"github.com/hetsync/hetsync/command"
)

func main() {
	os.Exit(command.Main(os.Args, os.Stdout, os.Stderr, command.Options{}))
}
