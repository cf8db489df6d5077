package trainer

import (
	"context"
	"fmt"

	"github.com/hetsync/hetsync/collective/kv"
)

// Parameter-server plumbing shared by ssp, dcasgd, wbsp and wbsp-opt (each strategy in its
// own file). Shards live on ranks 0..PSServers-1 (default rank 0 alone), as goroutines beside
// their workers, exactly as for asgd.

// startPS starts this rank's part of the parameter server with rule (and the SSP gate when
// gate is not nil), then pulls the initial model into w.Params and loads it.
func startPS(ctx context.Context, w *Worker, name string, rule kv.RuleFactory, gate *kv.SSPGate) (*kv.Service, error) {
	servers := make([]int, max(1, w.Cfg.PSServers))
	for i := range servers {
		servers[i] = i
	}
	svc, err := kv.Start(ctx, w.Endpoint, kv.Config{
		Len: len(w.Params), Servers: servers, Init: w.Params, Rule: rule, SSP: gate,
	})
	if err != nil {
		return nil, fmt.Errorf("trainer: rank %d: %s: starting the parameter server: %w", w.Rank, name, err)
	}
	if _, err := svc.Pull(ctx, w.Params, 0); err != nil {
		_ = svc.Close(ctx)
		return nil, fmt.Errorf("trainer: rank %d: %s: first pull: %w", w.Rank, name, err)
	}
	return svc, w.Load()
}

// psProgress fills the job-wide progress of a round from a server reply: the servers know
// every worker's clock (completed steps), so ClockSum steps of one batch each have been
// trained, and a round is one step per rank on average.
func psProgress(w *Worker, rs *RoundStats, rep kv.Reply) {
	rs.GlobalSamples = int64(rep.ClockSum) * int64(w.Cfg.Batch) // a partial last batch counts whole
	rs.GlobalRounds = int(rep.ClockSum) / w.Size
	rs.Stop = rep.Stop
}

// stepDelta sets delta = params − prev and then prev = params, in one pass: the change of
// the step just taken, with prev ready for the next one.
func stepDelta(delta, params, prev []float32) {
	prev = prev[:len(params)]
	delta = delta[:len(params)]
	for i, p := range params {
		delta[i] = p - prev[i]
		prev[i] = p
	}
}
