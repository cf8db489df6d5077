// Package ranktest starts the processes of a job the way an outside launcher would (each with
// the environment the test gives it) and collects their output, for tests of rank adoption
// and of hetsync.Init under Slurm, Open MPI, torchrun or Kubernetes variables.
//
// It is for tests only: it never decides what a rank's environment means and never leaves a
// process running after Run returns.
package ranktest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
)

// Run starts p processes of argv, rank r with the complete environment env(r), and waits for
// all of them. The first failure kills the others (through ctx) and every failure is in the
// error with that rank's output. outs[r] is rank r's combined stdout and stderr.
func Run(ctx context.Context, p int, argv []string, env func(r int) []string) (outs []string, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bufs := make([]bytes.Buffer, p)
	errs := make([]error, p)
	var wg sync.WaitGroup
	for r := range p {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = env(r)
		cmd.Stdout, cmd.Stderr = &bufs[r], &bufs[r]
		if err := cmd.Start(); err != nil {
			cancel()
			wg.Wait()
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cmd.Wait(); err != nil {
				errs[r] = fmt.Errorf("rank %d: %v\n%s", r, err, bufs[r].String())
				cancel()
			}
		}()
	}
	wg.Wait()
	outs = make([]string, p)
	for r := range bufs {
		outs[r] = bufs[r].String()
	}
	return outs, errors.Join(errs...)
}
