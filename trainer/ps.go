package trainer

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/hetsync/hetsync/collective/kv"
)

// Parameter-server plumbing shared by asgd, dcasgd, ssp, wbsp, wbsp-opt and Sync-Switch's ASP
// phase (each strategy in its own file). Shards live on the ranks the strategy's PSPlacement
// names (--ps-ranks, or ranks 0..--ps-servers-1; default rank 0 alone), as goroutines beside
// their workers.

// CollectivePS is the Config.Collective (--collective) of the strategies' parameter server:
// rounds that run over the strategy's own server (collective/kv) rather than the
// communicator's allreduce. Result.Collective then says ParameterServer.
const CollectivePS = "ps"

// psClient is a worker's side of the parameter server: the service, the worker's clock (its
// pushes so far) and the local step of the round in progress. Strategies embed it; its Finish
// closes the service.
//
// It is also the step-by-step form (Stepped) these strategies share: every local step ends
// this rank's own round, whose Sync is the step's exchange with the server, so no rank waits
// for another's round (only the server may hold a reply: ssp's staleness bound). Rank 0's
// stop vote rides on its push, and the servers' sticky stop flag reaches every other rank in
// the reply to its next push, after which its Sync reports the stop.
type psClient struct {
	svc   *kv.Service
	clock uint64
	step  StepReport // the round's one local step
}

// Asynchronous says that a round is one push of this rank, not a step of every rank.
func (c *psClient) Asynchronous() bool { return true }

// RanOver says that the rounds ran over the parameter server, whatever the communicator.
func (c *psClient) RanOver(*Worker) string { return ParameterServer }

func (c *psClient) Finish(ctx context.Context, w *Worker) error {
	if c.svc == nil {
		return nil
	}
	return c.svc.Close(ctx)
}

// Optimizer is the worker's: the local steps of --ssp-pull lazy and WBSP apply it (the
// strategies that push gradients leave the update to the server).
func (c *psClient) Optimizer(w *Worker) Optimizer { return w.Opt }

func (c *psClient) Begin(context.Context, *Worker) error { return nil }

func (c *psClient) AfterStep(_ *Worker, r StepReport) { c.step = r }

// ShouldSync: every local step is exchanged with the server.
func (c *psClient) ShouldSync(context.Context, *Worker) (bool, error) { return true, nil }

// pushPull is the exchange of the strategies that push the step's gradient and take the
// current model back (asgd, dcasgd, ssp --ssp-pull every, Sync-Switch's ASP phase): one
// request that pushes w.Grads and pulls the model into w.Params. comm is the request's time;
// name names the strategy in errors.
func (c *psClient) pushPull(ctx context.Context, w *Worker, stopVote bool, name string) (rep kv.Reply, comm time.Duration, err error) {
	c.clock++
	t0 := w.Now()
	rep, err = c.svc.PushPull(ctx, w.Grads, w.Params, c.clock, stopVote)
	if err != nil {
		return kv.Reply{}, 0, c.stepErr(w, name, err)
	}
	return rep, w.Now().Sub(t0), nil
}

// stepErr names the rank, the strategy and the push in an exchange's error.
func (c *psClient) stepErr(w *Worker, name string, err error) error {
	return fmt.Errorf("trainer: rank %d: %s step %d: %w", w.Rank, name, c.clock, err)
}

// roundOf is the round of the local step just reported, whose exchange took comm and got rep.
func (c *psClient) roundOf(rep kv.Reply, comm time.Duration) RoundStats {
	st := c.step
	return RoundStats{
		LocalSteps: 1, Samples: st.Samples, Loss: st.Loss, Correct: st.Correct, GlobalLoss: -1,
		Compute: st.Duration, Comm: comm, Staleness: rep.Staleness,
	}
}

// startPS starts this rank's part of the parameter server with rule (and the SSP gate when
// gate is not nil), then pulls the initial model into w.Params and loads it.
func startPS(ctx context.Context, w *Worker, name string, rule kv.RuleFactory, gate *kv.SSPGate) (*kv.Service, error) {
	servers := placement(w.Cfg)
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
	return svc, nil
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

// PSPlacement says which ranks host the parameter-server shards; the options of every
// parameter-server strategy embed it.
type PSPlacement struct {
	// PSServers puts the shards on ranks 0..PSServers-1; 0 means 1 (rank 0 alone).
	PSServers int `json:"ps_servers,omitempty"`
	// PSRanks are the ranks hosting the shards, in shard order; it excludes PSServers. A
	// server shares its rank's cores with that rank's worker: on a shared host, a rank that
	// mostly waits (a slowed worker) answers sooner than rank 0, which also trains at full
	// speed and evaluates (the originals run the server as a process of its own).
	PSRanks []int `json:"ps_ranks,omitempty"`
}

// Flags declares --ps-servers and --ps-ranks.
func (p *PSPlacement) Flags(fs *flag.FlagSet) {
	fs.IntVar(&p.PSServers, "ps-servers", p.PSServers, "ranks 0..N-1 host parameter-server shards (0 = rank 0)")
	fs.Var(rankList{p: &p.PSRanks, name: "ps-ranks"}, "ps-ranks", "the ranks hosting parameter-server shards, comma-separated, e.g. 3 or 1,3 (default: ranks 0..--ps-servers-1)")
}

// Validate checks the placement for a job of size ranks.
func (p *PSPlacement) Validate(size int) error {
	if p.PSServers < 0 || p.PSServers > size {
		return fmt.Errorf("trainer: --ps-servers must be in [0, %d] for %d ranks, got %d", size, size, p.PSServers)
	}
	seen := make(map[int]bool, len(p.PSRanks))
	for _, r := range p.PSRanks {
		if r < 0 || r >= size {
			return fmt.Errorf("trainer: --ps-ranks: rank %d out of range [0, %d)", r, size)
		}
		if seen[r] {
			return fmt.Errorf("trainer: --ps-ranks: rank %d listed twice", r)
		}
		seen[r] = true
	}
	if len(p.PSRanks) > 0 && p.PSServers > 0 {
		return fmt.Errorf("trainer: give --ps-ranks (the server ranks) or --ps-servers (ranks 0..N-1), not both")
	}
	return nil
}

// ServerRanks are the ranks hosting the shards, in shard order: PSRanks, or ranks
// 0..PSServers-1 (rank 0 alone by default).
func (p *PSPlacement) ServerRanks() []int {
	if len(p.PSRanks) > 0 {
		return append([]int(nil), p.PSRanks...)
	}
	servers := make([]int, max(1, p.PSServers))
	for i := range servers {
		servers[i] = i
	}
	return servers
}

// placement is the server placement of cfg's options: rank 0 alone for options without one.
func placement(cfg *Config) []int {
	if p, ok := cfg.Options.(interface{ ServerRanks() []int }); ok {
		return p.ServerRanks()
	}
	return []int{0}
}
