package schedpolicy

import (
	"fmt"
	"strings"
)

// Policy is what Apply does to the threads of this process.
type Policy string

const (
	// Inherit leaves every thread under the policy the process was started with.
	Inherit Policy = "inherit"
	// Batch puts every thread that runs under the default policy under SCHED_BATCH.
	Batch Policy = "batch"
)

// Names are the policies Parse accepts, for flags' help and errors.
func Names() []string { return []string{string(Batch), string(Inherit)} }

// Parse reads a policy's name; from names the flag, option or variable it came from, for the
// error.
func Parse(s, from string) (Policy, error) {
	switch p := Policy(strings.TrimSpace(s)); p {
	case Batch, Inherit:
		return p, nil
	}
	return "", fmt.Errorf("%s %q: unknown scheduling policy (known: %s)", from, s, strings.Join(Names(), ", "))
}
