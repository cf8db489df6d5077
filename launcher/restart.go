package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// EnvRestartCount tells a rank how many times its job was restarted before this attempt (0
// on the first), as torchrun's TORCHELASTIC_RESTART_COUNT does: a program that finds it above
// 0 continues from its last checkpoint.
const EnvRestartCount = "HETSYNC_RESTART_COUNT"

// Restarts is torchrun's restart policy: when a rank of a job fails, every other rank is
// stopped (Job.Run does that) and the whole job is started again, up to Max times.
type Restarts struct {
	// Max is the most restarts after the first attempt; 0 runs the job once.
	Max int
	// Log receives one line per restart, naming the failure it answers.
	Log io.Writer
	// Before, when set, runs before each restart (1, 2, …) with the failure that caused it;
	// an error ends the job with that error instead (nothing to restart from, too few hosts).
	Before func(restart int, failure error) error
}

// Run runs attempt(ctx, 0) and, after each failure of a rank (*RankFailure) while restarts
// are left, attempt(ctx, 1), attempt(ctx, 2), …. A job that ends otherwise (success, ctx
// cancelled, --timeout, a bad command line) is not restarted: starting it again would not
// change how it ends. The last attempt's error is returned, naming the restarts spent.
func (p Restarts) Run(ctx context.Context, attempt func(ctx context.Context, restart int) error) error {
	if p.Max < 0 {
		return fmt.Errorf("--max-restarts %d: must not be negative", p.Max)
	}
	for n := 0; ; n++ {
		err := attempt(ctx, n)
		var failed *RankFailure
		if err == nil || !errors.As(err, &failed) || ctx.Err() != nil {
			return err
		}
		if n == p.Max {
			if n > 0 {
				return fmt.Errorf("%w (after %d restart(s), --max-restarts %d)", err, n, p.Max)
			}
			return err
		}
		if p.Before != nil {
			if berr := p.Before(n+1, err); berr != nil {
				return berr
			}
		}
		if p.Log != nil {
			fmt.Fprintf(p.Log, "hetsync: %v; restarting the job (restart %d of %d)\n", err, n+1, p.Max)
		}
	}
}

// WithRestartCount is env with EnvRestartCount set to restart, replacing an inherited value.
func WithRestartCount(env []string, restart int) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, EnvRestartCount+"=") {
			out = append(out, kv)
		}
	}
	return append(out, EnvRestartCount+"="+strconv.Itoa(restart))
}
