package hetsync

import (
	"fmt"
	"log/slog"

	"github.com/hetsync/hetsync/internal/schedpolicy"
	"github.com/hetsync/hetsync/launcher"
)

// WithSched is the scheduling policy a rank of a launched job puts its threads under when
// Init joins it (InitLocal's ranks and a job of one share the caller's process and leave it
// as it is): "batch"
// (Linux's SCHED_BATCH: a thread copying or reducing is not preempted by every peer's
// wake-up; threads under a real-time or idle policy are left alone) or "inherit" (the policy
// the process was started with). It changes the whole process, and where other work shares
// the cores it makes small messages slower, so it is applied only when asked. Default:
// HETSYNC_SCHED, else inherit.
func WithSched(policy string) Option {
	return func(c *config) { c.sched = setting[string]{policy, fmt.Sprintf("WithSched(%q)", policy)} }
}

// schedPolicy is the policy the options or the launcher's variable ask for; a name that is
// neither batch nor inherit is an error naming where it came from.
func (c *config) schedPolicy(env launcher.Settings, rank int) (schedpolicy.Policy, error) {
	name, from := c.sched.pick(env.Sched, launcher.EnvSched)
	if name == "" {
		return schedpolicy.Inherit, nil
	}
	p, err := schedpolicy.Parse(name, from)
	if err != nil {
		return "", fmt.Errorf("rank %d: %w", rank, err)
	}
	return p, nil
}

// applySched puts this process's threads under p and returns the policy they run under. A
// policy the kernel refuses is a warning, not a failure: the rank runs as it was started.
func applySched(p schedpolicy.Policy, rank int, log *slog.Logger) string {
	got, err := schedpolicy.Apply(p)
	if err != nil {
		log.Warn(fmt.Sprintf("rank %d: scheduling policy %s not applied, running under %s: %v", rank, p, got, err))
	}
	return got
}
