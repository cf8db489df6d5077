package hetsync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/launcher"
	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/transport/p2p"
)

// Comm is this rank's communicator in a job, or in a sub-communicator that Split made from
// one. It has every method of collective.Comm (AllReduce, Broadcast, Barrier, Send, Recv,
// Rank, Size, Endpoint, ...), as the collective layer defines them, plus the rank's place on
// its host, Split and SplitByHost returning a Comm again, and Close.
type Comm struct {
	*collective.Comm
	localRank, localSize int
	settings             Settings
	// host is the lowest job rank that the transport proved to share this rank's host: the
	// same number on every rank of one host, whatever communicator they are in.
	host int
	// timeline is the job's Comm's timeline (WithTimeline), which its Close completes.
	timeline *collective.Timeline

	closeOnce sync.Once
	closeErr  error
}

// LocalRank is this rank's index among the ranks of c on its host. For the job's Comm it is
// the launcher's (HETSYNC_LOCAL_RANK and its equivalents); for a sub-communicator it counts
// the members that the transport proved to share this rank's host, in the order of c's ranks.
func (c *Comm) LocalRank() int { return c.localRank }

// LocalSize is the number of ranks of c on this rank's host, counted as LocalRank is.
func (c *Comm) LocalSize() int { return c.localSize }

// Settings are the algorithm and transport this rank runs with.
func (c *Comm) Settings() Settings { return c.settings }

// Close releases what c owns; every later call on c fails at once with an error wrapping
// ErrClosed. The job's Comm owns the endpoint: closing it leaves the job, after which every
// call on a sub-communicator made from it that reaches another rank fails too. A
// sub-communicator owns no connection (it shares the job's endpoint), so its Close leaves the
// job's endpoint and every other communicator open. Calling Close again returns the first
// call's result.
func (c *Comm) Close() error {
	c.closeOnce.Do(func() {
		// First, so that a call racing with the close fails as one on a closed Comm.
		_ = c.Comm.Close()
		if err := c.Endpoint().Close(); err != nil {
			c.closeErr = fmt.Errorf("rank %d: closing the endpoint: %w", c.Rank(), err)
		}
		if err := c.timeline.Close(); err != nil && c.closeErr == nil {
			c.closeErr = err
		}
	})
	return c.closeErr
}

// Init forms the job that started this process (see the package documentation for the
// launchers it recognises) and returns this rank's communicator once every rank has joined.
// It fails, naming the rank and the variable or option at fault, when the environment is
// malformed, when the other ranks do not arrive within the join timeout or when ctx ends.
func Init(ctx context.Context, opts ...Option) (*Comm, error) {
	cfg := newConfig(opts)
	env, under, err := launcher.RankEnvFromEnviron(cfg.getenv)
	if err != nil {
		return nil, fmt.Errorf("hetsync.Init: %w", err)
	}
	if !under {
		return initAlone(cfg)
	}
	r := cfg.resolve(env.Settings)
	r.Transport = "p2p"
	if r.Security == "" {
		r.Security = p2p.SecurityTLS
	}
	if r.DataPath == "" {
		r.DataPath = p2p.DataPathAuto
	}
	if r.JoinTimeout == 0 {
		r.JoinTimeout = p2p.DefaultJoinTimeout
	}
	copts, err := cfg.collectiveOptions(r, env.Rank, env.Size)
	if err != nil {
		return nil, fmt.Errorf("hetsync.Init: %w", err)
	}
	arenaBytes, err := r.arenaBytes(env.Rank)
	if err != nil {
		return nil, fmt.Errorf("hetsync.Init: %w", err)
	}
	w, err := cfg.resolveWatch(env.Rank, os.Stderr)
	if err != nil {
		return nil, fmt.Errorf("hetsync.Init: %w", err)
	}
	sched, err := cfg.schedPolicy(env.Settings, env.Rank)
	if err != nil {
		return nil, fmt.Errorf("hetsync.Init: %w", err)
	}
	// Before joining, so that the transport's threads start under the policy too.
	r.Sched = applySched(sched, env.Rank, w.logger)
	pc := p2p.Config{
		Rank: env.Rank, Size: env.Size, LocalRank: env.LocalRank, Rendezvous: env.Rendezvous, Secret: env.Secret,
		Security: r.Security, DataPath: r.DataPath, JoinTimeout: r.JoinTimeout, Host: env.Host, Hostname: env.Hostname,
		Stream: transport.StreamOptions{Checksum: r.Checksum, Poll: r.Poll}, Logger: w.logger,
		PeerTimeout: w.peerTimeout, ArenaBytes: arenaBytes,
	}
	if err := pc.Validate(); err != nil {
		return nil, fmt.Errorf("hetsync.Init: security %q from %s, data path %q from %s: %w",
			r.Security, r.securityFrom, r.DataPath, r.dataPathFrom, err)
	}
	ep, err := p2p.Join(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("hetsync.Init: rank %d: joining the job at %s: %w", env.Rank, env.Rendezvous, err)
	}
	r.Arena = transport.HostArena(ep) != nil
	if copts.Links, err = cfg.planLinks(ctx, ep, env, r.JoinTimeout); err != nil {
		_ = ep.Close()
		return nil, fmt.Errorf("hetsync.Init: %w", err)
	}
	if err := w.apply(&copts, env.Rank); err != nil {
		_ = ep.Close()
		return nil, fmt.Errorf("hetsync.Init: %w", err)
	}
	c, err := newComm(ep, copts, env.LocalRank, env.LocalSize, r, r.Settings)
	if err != nil {
		return nil, err
	}
	if err := c.joined(ctx, r.JoinTimeout); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("hetsync.Init: %w", err)
	}
	if w.debug {
		c.logPairs(w.logger, copts)
	}
	return c, nil
}

// joined waits until every rank has joined. A rank's join ends when its own connections are
// up, and each rank decides on its own clock whether its join timed out: without this barrier
// a rank whose join succeeded would start the program's collectives while another was still
// joining, or had given up and left, and its first collective would fail with that rank's
// abort notice instead of naming the join; and its work would take the CPU that the ranks
// still joining need to answer their peers within the join timeout.
func (c *Comm) joined(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := c.Barrier(ctx); err != nil {
		return fmt.Errorf("rank %d: waiting for every rank to join (%s or WithJoinTimeout, %v): %w",
			c.Rank(), launcher.EnvJoinTimeout, timeout, err)
	}
	return nil
}

// initAlone is Init in a process that no launcher adopted: a job of one rank, unless another
// launcher's variables say this process is one of several ranks.
func initAlone(cfg *config) (*Comm, error) {
	if name, size := launcher.ForeignLauncher(cfg.getenv); size > 1 {
		return nil, fmt.Errorf("hetsync.Init: started by %s as one of %d ranks, but %s (or %s) is not set: "+
			"give every rank the same job secret (e.g. openssl rand -hex 32) and rank 0's address in %s=HOST:PORT",
			name, size, launcher.EnvSecret, launcher.EnvSecretFile, launcher.EnvRendezvous)
	}
	env, err := launcher.SettingsFromEnviron(cfg.getenv)
	if err != nil {
		return nil, fmt.Errorf("hetsync.Init: %w", err)
	}
	r := cfg.resolve(env)
	copts, err := cfg.collectiveOptions(r, 0, 1)
	if err != nil {
		return nil, fmt.Errorf("hetsync.Init: %w", err)
	}
	if _, err := cfg.withWatch(&copts, 0); err != nil {
		return nil, fmt.Errorf("hetsync.Init: %w", err)
	}
	return newComm(transport.NewMemJob(1)[0], copts, 0, 1, r, memSettings(r.Settings))
}

// memSettings are s for an in-process job, which has no security or data path to choose.
func memSettings(s Settings) Settings {
	return Settings{Transport: "mem", Algorithm: s.Algorithm}
}

// newComm builds the communicator over ep, which owns o's timeline, with the algorithm r
// resolved (the one place Init builds it); on failure it closes ep and the timeline. s is
// what the Comm's Settings report.
func newComm(ep transport.Endpoint, o collective.Options, localRank, localSize int, r resolved, s Settings) (*Comm, error) {
	cc, err := collective.New(ep, o)
	if err != nil {
		_ = ep.Close()
		_ = o.Watch.Timeline.Close()
		return nil, fmt.Errorf("hetsync.Init: %w", r.algorithmError(ep.Rank(), err))
	}
	return &Comm{Comm: cc, localRank: localRank, localSize: localSize, settings: s, host: slices.Index(transport.SameHost(ep), true),
		timeline: o.Watch.Timeline}, nil
}

// Split partitions c like MPI_Comm_split (see collective.Comm.Split): the ranks that pass the
// same non-negative color form a new communicator, ranked by key and then by their rank in c;
// a rank that passes a negative color gets nil. It is a collective call on c, and one
// allgather on the new communicator finds which of its members share this rank's host
// (LocalRank, LocalSize). The new Comm has c's settings; close it when done with it.
func (c *Comm) Split(ctx context.Context, color, key int) (*Comm, error) {
	sub, err := c.Comm.Split(ctx, color, key)
	if err != nil || sub == nil {
		return nil, err
	}
	hosts := make([]int64, sub.Size())
	hosts[sub.Rank()] = int64(c.host)
	// Integers are exact on the wire whatever the codec.
	if err := sub.AllGather(ctx, collective.I64(hosts)); err != nil {
		return nil, fmt.Errorf("rank %d: split (color %d, key %d): exchanging hosts: %w", c.Rank(), color, key, err)
	}
	s := &Comm{Comm: sub, settings: c.settings, host: c.host}
	for r, h := range hosts {
		if h == int64(c.host) {
			if r < sub.Rank() {
				s.localRank++
			}
			s.localSize++
		}
	}
	return s, nil
}

// SplitByHost is Split with one color per host (MPI_COMM_TYPE_SHARED): the ranks of c that
// share this rank's host, in the order of their ranks in c. Whether two ranks share a host is
// the transport's verdict (transport.HostLocality): every rank of an InitLocal job shares
// one; the p2p transport proves it, and never assumes it.
func (c *Comm) SplitByHost(ctx context.Context) (*Comm, error) {
	return c.Split(ctx, c.host, c.Rank())
}

// InitLocal runs n ranks of one job as goroutines of this process over the in-process
// transport, each calling fn with its own Comm, and returns when every fn has returned. The
// first failure cancels the others' context and is the error returned. Each Comm is closed
// after its fn returns. The options apply as for Init; the transport ones have no effect.
func InitLocal(ctx context.Context, n int, fn func(ctx context.Context, c *Comm) error, opts ...Option) error {
	if n < 1 {
		return fmt.Errorf("hetsync.InitLocal: %d ranks: need at least 1", n)
	}
	if fn == nil {
		return errors.New("hetsync.InitLocal: nil rank function")
	}
	cfg := newConfig(opts)
	env, err := launcher.SettingsFromEnviron(cfg.getenv)
	if err != nil {
		return fmt.Errorf("hetsync.InitLocal: %w", err)
	}
	r := cfg.resolve(env)
	copts, err := cfg.collectiveOptions(r, 0, n)
	if err != nil {
		return fmt.Errorf("hetsync.InitLocal: %w", err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	eps := transport.NewMemJob(n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for rank, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := copts
			_, err := cfg.withWatch(&o, rank)
			var c *Comm
			if err == nil {
				c, err = newComm(ep, o, rank, n, r, memSettings(r.Settings))
			}
			if err == nil {
				err = fn(ctx, c)
				if cerr := c.Close(); err == nil {
					err = cerr
				}
			}
			if err != nil {
				errs[rank] = err
				cancel(err)
			}
		}()
	}
	wg.Wait()
	// The first failure caused the others' cancellations: report it.
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return errors.Join(errs...)
}
