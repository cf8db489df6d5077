package trainer

import (
	"context"
	"fmt"
	"sync"

	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/transport"
)

// liveRun writes a rank's records as the job runs, so that a job that is interrupted or loses
// a rank leaves what it measured: every rank appends its rounds to ranks/rank-N.jsonl of the
// run directory on its own host, and rank 0 also writes config.json at the start and each
// evaluation to eval.jsonl as it is taken. On rank 0 the first write error is kept and
// returned by err, which the run asks before every round: the job then stops after that round
// and fails naming the file (a full disk), rather than training on to its stop rule to fail
// there, or finishing with a silent gap; what was written stays. On the other ranks the file
// is a copy of what rank 0 gathers
// at the end, kept where the run directory's path can be written on the rank's host (on
// another host it may not exist): a rank that cannot open or write it carries on without it.
type liveRun struct {
	dir   string
	run   *metrics.RunDir // rank 0
	ranks *metrics.RankRecords

	mu    sync.Mutex
	first error
}

// openLiveRun opens rank's files under dir; rank 0 also creates the run directory with
// config.json, or, when the run continues from a checkpoint, opens the one it continues. An
// empty dir writes nothing.
func openLiveRun(dir string, rank int, config any, continues bool) (*liveRun, error) {
	l := &liveRun{dir: dir}
	if dir == "" {
		return l, nil
	}
	var err error
	if rank == 0 {
		if continues {
			l.run, err = metrics.OpenRunDir(dir)
		} else {
			l.run, err = metrics.CreateRunDir(dir, config)
		}
		if err != nil {
			return nil, fmt.Errorf("trainer: rank 0: %w", err)
		}
	}
	if l.ranks, err = metrics.OpenRankRecords(dir, rank); err != nil && rank == 0 {
		l.close()
		return nil, fmt.Errorf("trainer: %w", err)
	}
	return l, nil
}

func (l *liveRun) keep(err error) {
	if err == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.first == nil {
		l.first = err
	}
}

// round appends one of this rank's records.
func (l *liveRun) round(rec *metrics.RoundRecord) {
	if l.ranks == nil {
		return
	}
	if err := l.ranks.WriteRound(rec); err != nil {
		if l.run == nil {
			l.ranks.Close()
			l.ranks = nil
			return
		}
		l.keep(err)
	}
}

// eval appends one of rank 0's evaluations.
func (l *liveRun) eval(e EvalResult) {
	if l.run == nil || e.Err != nil {
		return
	}
	rec := metrics.EvalRecord{TimeS: e.SnapshotTime.Seconds(), Round: e.GlobalRound, Accuracy: e.Acc, Loss: e.Loss}
	l.keep(l.run.Evals().WriteEval(&rec))
}

func (l *liveRun) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first
}

func (l *liveRun) close() {
	if l.ranks != nil {
		l.keep(l.ranks.Close())
	}
	if l.run != nil {
		l.keep(l.run.Close())
	}
}

// endEarly closes a run that failed with cause on rank 0: summary.json then says that it
// ended early and why, over what the ranks wrote. Other ranks, and a run without a
// directory, do nothing.
func (l *liveRun) endEarly(ctx context.Context, cause error) error {
	l.close()
	if l.run == nil {
		return nil
	}
	reason := cause.Error()
	if ctx.Err() != nil {
		reason = metrics.Interrupted + context.Cause(ctx).Error()
	}
	if _, err := metrics.EndEarly(l.dir, reason); err != nil {
		return fmt.Errorf("trainer: rank 0: recording the early end of %s: %w", l.dir, err)
	}
	return nil
}

// finish writes the gathered records of every rank into metrics.jsonl (by rank, then round)
// and summary.json with ran.
func (l *liveRun) finish(all []metrics.RoundRecord, ran Ran) (metrics.Summary, error) {
	if l.ranks != nil {
		l.keep(l.ranks.Close())
	}
	if err := l.err(); err != nil {
		l.close()
		return metrics.Summary{}, err
	}
	return finishRun(l.run, all, ran)
}

// shareRunDir tells every rank rank 0's run directory (its own may differ, or be unset, when
// another launcher started the job): rank 0 sends it over the control channel and the others
// return it. "" means the job writes no run directory. A non-nil failed on rank 0 is why it
// cannot write dir: rank 0 sends that instead, and every rank returns it as its error.
func shareRunDir(ctx context.Context, ep transport.Endpoint, dir string, failed error) (string, error) {
	const maxPath = 4096
	rank := ep.Rank()
	if rank == 0 {
		if len(dir) >= maxPath {
			return "", fmt.Errorf("trainer: rank 0: run directory path of %d bytes is too long", len(dir))
		}
		msg := append([]byte{'d'}, dir...)
		if failed != nil {
			msg = append([]byte{'e'}, failed.Error()...)
			msg = msg[:min(len(msg), maxPath)]
		}
		for r := 1; r < ep.Size(); r++ {
			if err := controlSend(ctx, ep, r, ctrlRunDir, msg); err != nil {
				return "", fmt.Errorf("trainer: rank 0: sending the run directory to rank %d: %w", r, err)
			}
		}
		if failed != nil {
			return "", failed
		}
		return dir, nil
	}
	buf := make([]byte, maxPath)
	n, err := controlRecv(ctx, ep, 0, ctrlRunDir, buf)
	if err != nil {
		return "", fmt.Errorf("trainer: rank %d: receiving the run directory from rank 0: %w", rank, err)
	}
	switch {
	case n >= 1 && buf[0] == 'd':
		return string(buf[1:n]), nil
	case n >= 1 && buf[0] == 'e':
		return "", fmt.Errorf("trainer: rank %d: rank 0 cannot write the run directory: %s", rank, buf[1:n])
	}
	return "", fmt.Errorf("trainer: rank %d: malformed run directory message from rank 0", rank)
}
