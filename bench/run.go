package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/hetsync/hetsync/collective"
)

// Communicator is the part of *collective.Comm the benchmark drives.
type Communicator interface {
	Rank() int
	Size() int
	Algorithm() string
	AllReduce(ctx context.Context, buf collective.Buffer, op collective.ReduceOp) error
	ReduceScatter(ctx context.Context, buf collective.Buffer, op collective.ReduceOp) error
	AllGather(ctx context.Context, buf collective.Buffer) error
	Broadcast(ctx context.Context, buf collective.Buffer, root int) error
	AllToAll(ctx context.Context, send, recv collective.Buffer) error
	Barrier(ctx context.Context) error
}

// Config is one benchmark run: one op over a sweep of sizes.
type Config struct {
	Op    Op
	RedOp collective.ReduceOp // allreduce and reducescatter; 0 means Sum
	// MinBytes, MaxBytes and Factor are nccl-tests' -b, -e and -f.
	MinBytes, MaxBytes int64
	Factor             int
	Warmup             int // -w: untimed calls per size
	Iters              int // -n: timed calls per size (unless TargetSeconds is set)
	// TargetSeconds, when > 0, sizes each timed loop to about this many seconds, as the
	// comparison harness sizes Open MPI's and Gloo's (it sets TARGET_SEC): the count becomes
	// target / (slowest rank's warm-up time per call), at least 2 and at most 10⁶, and a tenth
	// of that count more warm-up calls run first (the harness's WARMUP_FRAC).
	TargetSeconds float64
	// Settle, when > 0, runs the first size untimed until rank 0 has spent this long in it,
	// before anything is timed: the first calls of a fresh job run slower while the libp2p
	// host finishes its background work and the Go runtime sizes its heap, enough to skew the
	// small sizes' rows (docs/results/tuning.md, "Settling a fresh job").
	Settle time.Duration
	Check  int // -c: checked calls per size (after the timed ones)
	// Attribute is how many calls per size run with attribution on, after the checked ones
	// and untimed (attribution adds an exchange to each call): they fill the rows' arrival
	// skew, late rank and culprit (docs/attribution.md).
	Attribute int
	Root      int // broadcast root
	// Tolerance, when > 0, counts an allreduce or reduce-scatter element as right when it is
	// within Tolerance of the exact value: the bound of a lossy compression
	// (collective.CompressedBound), whose results are not exact even on small integers.
	Tolerance float64
	// ShowSent adds the bytes each rank sent per timed call to the rows (Row.SentBytes) and
	// to the text table, for a communicator that counts them (BytesSent).
	ShowSent bool
}

// Validate checks the configuration against a job of p ranks.
func (c Config) Validate(p int) error {
	if _, err := ParseOp(c.Op.String()); err != nil {
		return fmt.Errorf("op: %v", err)
	}
	if c.RedOp != 0 {
		if _, err := ParseRedOp(c.RedOp.String()); err != nil {
			return fmt.Errorf("-o: %v", err)
		}
	}
	if _, err := Sweep(c.MinBytes, c.MaxBytes, c.Factor); err != nil {
		return err
	}
	if c.MaxBytes > 1<<34 {
		return fmt.Errorf("-e %s: larger than the 16G this benchmark allocates at most", FormatSize(c.MaxBytes))
	}
	if c.Settle < 0 {
		return fmt.Errorf("--settle %v: must not be negative", c.Settle)
	}
	if c.Warmup < 0 {
		return fmt.Errorf("-w %d: warm-up iterations must be >= 0", c.Warmup)
	}
	if c.Iters < 1 {
		return fmt.Errorf("-n %d: need at least 1 timed iteration", c.Iters)
	}
	if c.TargetSeconds < 0 {
		return fmt.Errorf("--target-sec %v: must not be negative", c.TargetSeconds)
	}
	if c.Check < 0 {
		return fmt.Errorf("-c %d: checked iterations must be >= 0", c.Check)
	}
	if c.Attribute < 0 {
		return fmt.Errorf("--attribute %d: attributed iterations must be >= 0", c.Attribute)
	}
	if c.Root < 0 || c.Root >= p {
		return fmt.Errorf("-r %d: root must be a rank in [0, %d)", c.Root, p)
	}
	return nil
}

func (c Config) redOp() collective.ReduceOp {
	if c.RedOp == 0 {
		return collective.Sum
	}
	return c.RedOp
}

// Row is the result for one size. Every rank gets the same rows.
type Row struct {
	Bytes  int64   `json:"bytes"`
	Count  int     `json:"count"`
	Type   string  `json:"type"`
	RedOp  string  `json:"redop"`
	Algo   string  `json:"algo"`
	Iters  int     `json:"iters"`
	AvgUs  float64 `json:"avg_us"` // time per call, averaged over ranks
	MinUs  float64 `json:"min_us"` // fastest rank's time per call
	MaxUs  float64 `json:"max_us"` // slowest rank's time per call
	AlgBW  float64 `json:"algbw_GBps"`
	BusBW  float64 `json:"busbw_GBps"`
	Checks int     `json:"checks"` // checked calls per rank; 0 = not checked
	Wrong  int64   `json:"wrong"`  // wrong elements over all ranks and checked calls
	// SentBytes is the payload bytes a rank sent per timed call, averaged over the ranks
	// (Config.ShowSent; 0 otherwise).
	SentBytes float64 `json:"sent_bytes_per_rank,omitempty"`
	// Attribution is whom the size's attributed calls waited for (Config.Attribute).
	Attribution
}

// byteCounter is a communicator that counts the payload bytes it sent (collective.Comm).
type byteCounter interface{ BytesSent() int64 }

// statsStride is how many numbers a rank contributes to the gathered stats: its time per
// call, its wrong elements and the bytes it sent per call.
const statsStride = 3

// CheckString is the TSV check column: "OK", "wrong=N", or "unchecked".
func (r Row) CheckString() string {
	switch {
	case r.Checks == 0:
		return "unchecked"
	case r.Wrong == 0:
		return "OK"
	default:
		return fmt.Sprintf("wrong=%d", r.Wrong)
	}
}

// Run measures cfg.Op with comm over the size sweep; see Runner.
func Run(ctx context.Context, comm Communicator, cfg Config, onRow func(Row) error) ([]Row, error) {
	return (&Runner{Comm: comm, Config: cfg, OnRow: onRow}).Run(ctx)
}

// Runner is one benchmark run on one rank.
type Runner struct {
	// Comm is the communicator under test.
	Comm Communicator
	// Gather synchronises the ranks before each timed loop and gathers the per-rank times and
	// error counts. Nil means Comm. Use a separate communicator on the same endpoint when
	// Comm's wire codec is lossy (fp16, bf16) or restricted to float32, since the results are
	// float64 and must arrive exactly.
	Gather Communicator
	Config Config
	// OnRow, when not nil, is called with each row as soon as it is known (on every rank), so a
	// caller can print while the sweep goes on.
	OnRow func(Row) error
}

// clearYielding zeroes b a mebibyte at a time and lets the scheduler run other goroutines
// between the pieces. A clear is one memclr call that cannot be preempted, and on a rank with
// one P (the launcher gives each of its ranks cores/ranks of them) that first touches a large
// buffer's pages on a loaded host it lasts seconds, during which the rank's heartbeat senders
// and timers cannot run and its peers see it silent.
func clearYielding(b []float32) {
	const piece = 1 << 18 // float32s: 1 MiB
	for len(b) > piece {
		clear(b[:piece])
		b = b[piece:]
		runtime.Gosched()
	}
	clear(b)
}

// Run measures the sweep. Every rank of the communicator must call it with the same
// configuration, and every rank gets the same rows. Buffers for the largest size are
// allocated once; the timed loop allocates nothing.
func (rn *Runner) Run(ctx context.Context) ([]Row, error) {
	comm, cfg, onRow := rn.Comm, rn.Config, rn.OnRow
	gather := rn.Gather
	if gather == nil {
		gather = comm
	}
	p, rank := comm.Size(), comm.Rank()
	if gather.Size() != p || gather.Rank() != rank {
		return nil, fmt.Errorf("rank %d: bench: the gather communicator is rank %d of %d, the one under test rank %d of %d",
			rank, gather.Rank(), gather.Size(), rank, p)
	}
	if err := cfg.Validate(p); err != nil {
		return nil, fmt.Errorf("rank %d: bench: %w", rank, err)
	}
	sizes, _ := Sweep(cfg.MinBytes, cfg.MaxBytes, cfg.Factor)
	red := cfg.redOp()
	maxN := elements(cfg.Op, sizes[len(sizes)-1], p)
	buf := make([]float32, maxN)
	var send []float32
	if cfg.Op == AllToAll {
		send = make([]float32, maxN)
	}
	var expect []float64
	if cfg.Op.reduces() {
		expect = expectTable(red, p)
	}
	// stats: rank r's [time per call in seconds, wrong elements, bytes sent per call] at
	// [statsStride·r, statsStride·(r+1)), gathered with the gather communicator.
	stats := make([]float64, statsStride*p)
	counter, _ := comm.(byteCounter)

	var rows []Row
	prev := -1
	for _, size := range sizes {
		n := elements(cfg.Op, size, p)
		if n == prev {
			continue // rounding made this size equal to the previous one
		}
		prev = n
		b := buf[:n]
		var s []float32
		if send != nil {
			s = send[:n]
		}
		call := func() error {
			switch cfg.Op {
			case AllReduce:
				return comm.AllReduce(ctx, collective.F32(b), red)
			case ReduceScatter:
				return comm.ReduceScatter(ctx, collective.F32(b), red)
			case AllGather:
				return comm.AllGather(ctx, collective.F32(b))
			case Broadcast:
				return comm.Broadcast(ctx, collective.F32(b), cfg.Root)
			case AllToAll:
				return comm.AllToAll(ctx, collective.F32(s), collective.F32(b))
			}
			return errors.New("unknown op")
		}
		calls := func(k int) error {
			for range k {
				if err := call(); err != nil {
					return err
				}
			}
			return nil
		}
		where := func(phase string, err error) error {
			return fmt.Errorf("rank %d: bench %s %s size %d (%s): %w", rank, comm.Algorithm(), cfg.Op, 4*n, phase, err)
		}

		// Warm-up and timed calls run on zeros: every op keeps zeros zero, so values never
		// grow into infinities or denormals whatever the iteration count.
		clearYielding(b)
		clearYielding(s)
		if len(rows) == 0 && cfg.Settle > 0 {
			if err := settle(ctx, calls, gather, rank, cfg.Settle); err != nil {
				return rows, where("settling", err)
			}
		}
		warm := cfg.Warmup
		if cfg.TargetSeconds > 0 {
			warm = max(warm, 1) // the estimate needs one call
		}
		start := time.Now()
		if err := calls(warm); err != nil {
			return rows, where("warm-up", err)
		}
		iters := cfg.Iters
		if cfg.TargetSeconds > 0 {
			// Every rank must run the same count: agree on the slowest rank's estimate.
			clear(stats)
			stats[statsStride*rank] = time.Since(start).Seconds() / float64(warm)
			if err := gather.AllGather(ctx, collective.F64(stats)); err != nil {
				return rows, where("agreeing on the iteration count", err)
			}
			iters = itersFor(cfg.TargetSeconds, slowest(stats))
			if err := calls(iters/10 - warm); err != nil {
				return rows, where("warm-up", err)
			}
		}
		if err := gather.Barrier(ctx); err != nil {
			return rows, where("barrier", err)
		}
		var sent0 int64
		if counter != nil {
			sent0 = counter.BytesSent()
		}
		start = time.Now()
		if err := calls(iters); err != nil {
			return rows, where("timed", err)
		}
		perCall := time.Since(start).Seconds() / float64(iters)
		var sentPerCall float64
		if counter != nil {
			sentPerCall = float64(counter.BytesSent()-sent0) / float64(iters)
		}

		var wrong int64
		for i := 0; i < cfg.Check; i++ {
			fill(cfg.Op, red, rank, p, cfg.Root, b, s)
			if err := call(); err != nil {
				return rows, where("check", err)
			}
			wrong += countWrong(cfg.Op, red, rank, p, cfg.Root, b, expect, cfg.Tolerance)
		}
		clearYielding(b)
		clearYielding(s)
		attr, err := attribute(comm, cfg.Attribute, call)
		if err != nil {
			return rows, where("attributed", err)
		}

		clear(stats)
		stats[statsStride*rank], stats[statsStride*rank+1], stats[statsStride*rank+2] = perCall, float64(wrong), sentPerCall
		if err := gather.AllGather(ctx, collective.F64(stats)); err != nil {
			return rows, where("gathering results", err)
		}
		row := summarize(cfg, comm.Algorithm(), p, n, stats)
		row.Iters, row.Attribution = iters, attr
		rows = append(rows, row)
		if onRow != nil {
			if err := onRow(row); err != nil {
				return rows, err
			}
		}
	}
	return rows, nil
}

// settleBatch is how many calls settle makes between two looks at the clock.
const settleBatch = 20

// settle makes calls until rank 0 has spent d in them; rank 0 tells the others when with a
// broadcast every settleBatch calls, so that every rank makes the same number of calls.
func settle(ctx context.Context, calls func(k int) error, gather Communicator, rank int, d time.Duration) error {
	flag := []float64{0}
	start := time.Now()
	for {
		if err := calls(settleBatch); err != nil {
			return err
		}
		flag[0] = 0
		if rank == 0 && time.Since(start) >= d {
			flag[0] = 1
		}
		if err := gather.Broadcast(ctx, collective.F64(flag), 0); err != nil {
			return err
		}
		if flag[0] != 0 {
			return nil
		}
	}
}

// slowest is the largest time in the gathered [time, wrong] pairs.
func slowest(stats []float64) float64 {
	var m float64
	for i := 0; i < len(stats); i += statsStride {
		m = max(m, stats[i])
	}
	return m
}

// Bounds of the timed calls per size under TargetSeconds (the lower one is the harness's
// MIN_ITERS).
const (
	minTargetIters = 2
	maxTargetIters = 1_000_000
)

// itersFor is the number of calls of perCall seconds that fill target seconds, in
// [minTargetIters, maxTargetIters].
func itersFor(target, perCall float64) int {
	if perCall <= 0 {
		return maxTargetIters
	}
	n := target / perCall
	if n >= maxTargetIters {
		return maxTargetIters
	}
	return max(minTargetIters, int(n))
}

// summarize turns the gathered per-rank [seconds per call, wrong] pairs into a row.
func summarize(cfg Config, algo string, p, n int, stats []float64) Row {
	row := Row{
		Bytes: int64(4 * n), Count: n, Type: collective.Float32.String(), RedOp: "none", Algo: algo,
		Iters: cfg.Iters, Checks: cfg.Check,
	}
	if cfg.Op.reduces() {
		row.RedOp = cfg.redOp().String()
	}
	var sum, sent float64
	for r := 0; r < p; r++ {
		t := stats[statsStride*r] * 1e6
		sent += stats[statsStride*r+2]
		sum += t
		if r == 0 || t < row.MinUs {
			row.MinUs = t
		}
		if r == 0 || t > row.MaxUs {
			row.MaxUs = t
		}
		row.Wrong += int64(stats[statsStride*r+1])
	}
	row.AvgUs = sum / float64(p)
	if cfg.ShowSent {
		row.SentBytes = sent / float64(p)
	}
	if row.AvgUs > 0 {
		row.AlgBW = float64(row.Bytes) / (row.AvgUs * 1e-6) / 1e9
	}
	row.BusBW = row.AlgBW * BusFactor(cfg.Op, p)
	return row
}
