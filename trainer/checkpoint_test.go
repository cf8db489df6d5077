package trainer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/transport"
)

// testCheckpoint is a checkpoint of n parameters, an optimizer state of nOpt bytes and a
// strategy state of state bytes.
func testCheckpoint(n, nOpt, state int) *Checkpoint {
	c := &Checkpoint{
		CheckpointHeader: CheckpointHeader{Strategy: "ssgd", WorldSize: 3, Seed: 7, Round: 11, Steps: 11, GlobalRounds: 11, GlobalSamples: 704, Elapsed: 1500 * time.Millisecond, Optimizer: "sgd"},
		Params:           make([]float32, n), OptimizerState: make([]byte, nOpt), State: make([]byte, state),
	}
	for i := range c.Params {
		c.Params[i] = float32(i) * 0.25
	}
	for i := range c.OptimizerState {
		c.OptimizerState[i] = byte(255 - i)
	}
	for i := range c.State {
		c.State[i] = byte(i)
	}
	return c
}

func TestCheckpointRoundTrip(t *testing.T) {
	for _, tc := range []struct{ n, nOpt, state int }{{1, 0, 0}, {1, 4, 16}, {7, 28, 3}, {7, 64, 3}, {13, 0, 1}, {1021, 4084, 16}} {
		t.Run(fmt.Sprintf("n%d-o%d-s%d", tc.n, tc.nOpt, tc.state), func(t *testing.T) {
			dir := t.TempDir()
			want := testCheckpoint(tc.n, tc.nOpt, tc.state)
			if err := WriteCheckpoint(dir, want); err != nil {
				t.Fatal(err)
			}
			got, err := ReadCheckpoint(dir)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Params, want.Params) || !bytes.Equal(got.OptimizerState, want.OptimizerState) || !bytes.Equal(got.State, want.State) {
				t.Fatalf("payload differs after the round trip")
			}
			if got.Round != 11 || got.Steps != 11 || got.GlobalSamples != 704 || got.Elapsed != 1500*time.Millisecond || got.Strategy != "ssgd" || got.Optimizer != "sgd" {
				t.Fatalf("header %+v", got.CheckpointHeader)
			}
			// A second checkpoint replaces the first and leaves no temporary file.
			want.Round = 12
			if err := WriteCheckpoint(dir, want); err != nil {
				t.Fatal(err)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 || entries[0].Name() != CheckpointFile {
				t.Fatalf("directory holds %v, want only %s", entries, CheckpointFile)
			}
		})
	}
}

func TestCheckpointCorruptionNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	if err := WriteCheckpoint(dir, testCheckpoint(9, 36, 16)); err != nil {
		t.Fatal(err)
	}
	path := CheckpointPath(dir)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	headerEnd := bytes.IndexByte(good[len(checkpointMagic):], '\n') + len(checkpointMagic)
	flip := func(i int) []byte { b := slices.Clone(good); b[i] ^= 0x40; return b }
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"not a checkpoint", []byte("PK\x03\x04 some zip file, long enough"), "wrong first line"},
		{"another version", append([]byte("hetsync-checkpoint 9\n"), good[len(checkpointMagic):]...), `format "hetsync-checkpoint 9"`},
		{"header cut", good[:headerEnd-3], "header line does not end"},
		{"payload cut", good[:len(good)-5], "truncated or extended"},
		{"extended", append(slices.Clone(good), 0), "truncated or extended"},
		{"payload bit flipped", flip(len(good) - 40), "checksum"},
		{"header garbage", slices.Concat([]byte(checkpointMagic), []byte("{nope\n"), good[headerEnd+1:]), "header"},
		{"unknown header field", slices.Concat([]byte(checkpointMagic), []byte(`{"strategy":"ssgd","extra":1}`+"\n")), "unknown field"},
		{"negative round", slices.Concat([]byte(checkpointMagic), []byte(`{"strategy":"ssgd","optimizer":"sgd","world_size":1,"round":-1,"num_params":1}`+"\n"), make([]byte, 4)), "impossible value"},
		{"no optimizer", slices.Concat([]byte(checkpointMagic), []byte(`{"strategy":"ssgd","world_size":1,"num_params":1}`+"\n"), make([]byte, 4)), "names no optimizer"},
		{"version 1's velocity in version 2", slices.Concat([]byte(checkpointMagic), []byte(`{"strategy":"ssgd","optimizer":"sgd","world_size":1,"num_params":1,"num_velocity":1}`+"\n"), make([]byte, 8)), "names no optimizer"},
		{"version 2's optimizer in version 1", slices.Concat([]byte(checkpointMagicV1), []byte(`{"strategy":"ssgd","optimizer":"adam","world_size":1,"num_params":1}`+"\n"), make([]byte, 4)), "version 1 checkpoint holds an impossible value"},
		{"negative optimizer state", slices.Concat([]byte(checkpointMagic), []byte(`{"strategy":"ssgd","optimizer":"sgd","world_size":1,"num_params":1,"optimizer_bytes":-4}`+"\n")), "impossible value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadCheckpoint(dir)
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %s and saying %q", err, path, tc.want)
			}
		})
	}
	if _, err := ReadCheckpoint(t.TempDir()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing checkpoint: got %v, want os.ErrNotExist", err)
	}
}

func TestCheckpointMismatchNamesIt(t *testing.T) {
	ck := testCheckpoint(9, 36, 16)
	base := Config{Strategy: "ssgd", Seed: 7, Momentum: 0.9}
	for _, tc := range []struct {
		name      string
		cfg       func(*Config)
		size, n   int
		resizable bool
		want      string
	}{
		{"same", func(*Config) {}, 3, 9, false, ""},
		{"strategy", func(c *Config) { c.Strategy = "esync" }, 3, 9, true, "is of Config.Strategy ssgd, this job runs Config.Strategy esync"},
		{"model", func(*Config) {}, 3, 10, true, "9 parameters, this job's model has 10"},
		{"seed", func(c *Config) { c.Seed = 8 }, 3, 9, true, "Config.Seed 7, this job has Config.Seed 8"},
		{"world size refused", func(*Config) {}, 2, 9, false, "written by 3 ranks and Config.Strategy ssgd cannot continue on 2"},
		{"world size allowed", func(*Config) {}, 2, 9, true, ""},
		{"optimizer", func(c *Config) { c.Optimizer = "adam" }, 3, 9, true, "holds the state of Config.Optimizer sgd, this job runs Config.Optimizer adam"},
		{"optimizer named", func(c *Config) { c.Optimizer = "sgd" }, 3, 9, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.cfg(&cfg)
			err := ck.Matches("run/checkpoint.ckpt", &cfg, tc.size, tc.n, tc.resizable)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "run/checkpoint.ckpt") {
				t.Fatalf("got %v, want an error naming the file and %q", err, tc.want)
			}
		})
	}
}

// ckptJob is one synthetic ssgd job of the resume tests.
type ckptJob struct {
	cfg      Config
	size     int
	opts     CheckpointOptions
	cancelAt int // rank 0 cancels the job after this round (0-based) when ≥ 0
	// resume, when set, is a run directory of per-rank parts each rank continues from.
	resume string
	// only0, when set, gives opts and resume to rank 0 alone.
	only0 bool
	// steps, when set, receives each rank's step count after each round.
	steps func(rank, round int, steps uint64)
	// timeout bounds the job (0: 2 minutes), so that a job that hangs fails its test.
	timeout time.Duration
	// wrap, when set, decorates each rank's endpoint (a slow network).
	wrap func(transport.Endpoint) transport.Endpoint
}

// ckptOutcome is what a ckptJob left: rank 0's records and every rank's final parameters.
type ckptOutcome struct {
	records []metrics.RoundRecord
	params  [][]float32
	acc     float64
	err     error
}

// runCkptJob runs j over in-process ranks. A job that rank 0 cancels ends with err set, as
// a killed job ends.
func runCkptJob(t *testing.T, j ckptJob) ckptOutcome {
	t.Helper()
	cfg := j.cfg
	cfg.Defaults()
	if err := Builtin().Validate(&cfg, j.size); err != nil {
		t.Fatal(err)
	}
	timeout := j.timeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	eps := transport.NewMemJob(j.size)
	defer transport.CloseAll(eps)
	train, test := newSynthSet(1200, 1), newSynthSet(600, 2)
	out := ckptOutcome{params: make([][]float32, j.size), acc: -1}
	errs := make([]error, j.size)
	var wg sync.WaitGroup
	for r, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() error {
				if j.wrap != nil {
					ep = j.wrap(ep)
				}
				w, err := newSynthWorker(&cfg, ep, train, r, j.size)
				if err != nil {
					return err
				}
				strat, err := NewStrategy(&cfg)
				if err != nil {
					return err
				}
				ckOpts, resume := j.opts, j.resume
				if j.only0 && r != 0 {
					ckOpts, resume = CheckpointOptions{}, ""
				}
				opts := TrainOptions{TrainSize: len(train.y), Checkpoint: ckOpts, AfterRound: func(rec *metrics.RoundRecord) {
					if j.steps != nil {
						j.steps(w.Rank, rec.Round, w.Steps())
					}
					if w.Rank == 0 && rec.Round == j.cancelAt {
						cancel()
					}
				}}
				if r == 0 {
					opts.Eval = synthEval(test)
				}
				if resume != "" {
					if opts.Checkpoint.Resume, opts.Checkpoint.File, err = LoadCheckpoint(resume, r); err != nil {
						return err
					}
				}
				res, err := Run(ctx, w, strat, opts)
				if err != nil {
					return err
				}
				out.params[r] = slices.Clone(w.Params)
				if r == 0 {
					out.records, out.acc = res.Records, res.FinalAcc
				}
				return nil
			}()
			if errs[r] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	out.err = errors.Join(errs...)
	return out
}

// TestResumeContinuesBitwise kills an ssgd job after a checkpoint and resumes it: the resumed
// job runs exactly the rounds the killed one had left (none lost, none repeated) and ends with
// the same model as an uninterrupted job, on every rank, bitwise; so its accuracy is the
// uninterrupted job's.
func TestResumeContinuesBitwise(t *testing.T) {
	const rounds = 24
	for _, size := range []int{1, 2, 3, 4, 5, 7, 9} {
		for _, every := range []int{1, 5} {
			t.Run(fmt.Sprintf("np%d-every%d", size, every), func(t *testing.T) {
				cfg := Config{Strategy: "ssgd", Collective: "ring", Batch: 7, LR: 0.1, Momentum: 0.9, MaxRounds: rounds, Seed: 3}
				whole := runCkptJob(t, ckptJob{cfg: cfg, size: size, cancelAt: -1})
				if whole.err != nil {
					t.Fatal(whole.err)
				}
				dir := t.TempDir()
				// Killed after round 13 (0-based): the last checkpoint is the one after round
				// 13 (every 1) or after round 9 (every 5), so 14 or 10 rounds are kept.
				killed := runCkptJob(t, ckptJob{cfg: cfg, size: size, cancelAt: 13, opts: CheckpointOptions{Dir: dir, Every: EvalEvery{Rounds: every}}})
				if killed.err == nil {
					t.Fatal("the killed job did not fail")
				}
				ck, err := ReadCheckpoint(dir)
				if err != nil {
					t.Fatal(err)
				}
				kept := 14 / every * every
				if ck.Round != kept || ck.Steps != uint64(kept) || ck.WorldSize != size {
					t.Fatalf("checkpoint after round %d with %d steps of %d ranks, want round %d", ck.Round, ck.Steps, ck.WorldSize, kept)
				}
				resumed := runCkptJob(t, ckptJob{cfg: cfg, size: size, cancelAt: -1, opts: CheckpointOptions{Resume: ck, File: CheckpointPath(dir)}})
				if resumed.err != nil {
					t.Fatal(resumed.err)
				}
				if n := len(resumed.records); n != rounds-kept || resumed.records[0].Round != kept || resumed.records[n-1].Round != rounds-1 {
					t.Fatalf("resumed rounds %d..%d (%d), want %d..%d", resumed.records[0].Round, resumed.records[n-1].Round, n, kept, rounds-1)
				}
				for r := range size {
					if !slices.Equal(resumed.params[r], whole.params[r]) {
						t.Fatalf("rank %d: the resumed model differs from the uninterrupted one", r)
					}
				}
				if resumed.acc != whole.acc {
					t.Fatalf("accuracy %v resumed, %v uninterrupted", resumed.acc, whole.acc)
				}
			})
		}
	}
}

// TestResumeOnFewerRanks continues a 4-rank ssgd checkpoint on 3 ranks (ssgd is resizable):
// the job ends at the same round count, every rank holding the same model.
func TestResumeOnFewerRanks(t *testing.T) {
	cfg := Config{Strategy: "ssgd", Collective: "ring", Batch: 5, LR: 0.1, Momentum: 0.9, MaxRounds: 12, Seed: 2}
	dir := t.TempDir()
	if out := runCkptJob(t, ckptJob{cfg: cfg, size: 4, cancelAt: 6, opts: CheckpointOptions{Dir: dir, Every: EvalEvery{Rounds: 3}}}); out.err == nil {
		t.Fatal("the killed job did not fail")
	}
	ck, err := ReadCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := runCkptJob(t, ckptJob{cfg: cfg, size: 3, cancelAt: -1, opts: CheckpointOptions{Resume: ck, File: CheckpointPath(dir)}})
	if out.err != nil {
		t.Fatal(out.err)
	}
	if got := out.records[len(out.records)-1].Round; out.records[0].Round != 6 || got != 11 {
		t.Fatalf("resumed rounds %d..%d, want 6..11", out.records[0].Round, got)
	}
	for r := 1; r < 3; r++ {
		if !slices.Equal(out.params[r], out.params[0]) {
			t.Fatalf("rank %d's model differs from rank 0's", r)
		}
	}
}

// TestCheckpointRefusedWithReason: strategies whose ranks do not share one state refuse
// --checkpoint-every and --resume, saying why, before any round.
func TestCheckpointRefusedWithReason(t *testing.T) {
	for _, tc := range []struct{ name, collective, why string }{
		{"local", "", "share no round to checkpoint at"},
		{"asgd", "", "parameter-server ranks"},
		{"dcasgd", "", "delay-compensation backups"},
		{"ssp", "", "workers' clocks"},
		{"wbsp", "ps", "buffered uploads"},
		{"wbsp-opt", "ps", "unsent deltas"},
		{"wbsp-opt", "ring", "not yet sent"},
		{"sync-switch", "", "asynchronous phase"},
	} {
		name := tc.name
		t.Run(name+"-"+tc.collective, func(t *testing.T) {
			cfg := Config{Strategy: name, Collective: tc.collective, MaxRounds: 3}
			cfg.Defaults()
			reg := Builtin()
			if err := reg.Configure(&cfg); err != nil {
				t.Fatal(err)
			}
			strat, err := reg.New(&cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, err = checkpointer(strat, CheckpointOptions{Dir: t.TempDir(), Every: EvalEvery{Rounds: 2}})
			if err == nil || !strings.Contains(err.Error(), "--sync "+name+" cannot be checkpointed: ") || !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), "one part per rank") {
				t.Fatalf("got %v", err)
			}
		})
	}
}

// TestRewindRunKeepsEachRoundOnce: a run directory that recorded rounds past its checkpoint
// keeps those before it and takes the resumed run's, each round once, in metrics.jsonl and in
// each rank's own file.
func TestRewindRunKeepsEachRoundOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	rec := func(rank, round int) metrics.RoundRecord {
		return metrics.RoundRecord{Rank: rank, Round: round, TimeS: float64(round), Samples: 4, LocalSteps: 1}
	}
	var before []metrics.RoundRecord
	for round := range 7 {
		before = append(before, rec(0, round), rec(1, round))
	}
	evals := []EvalResult{{GlobalRound: 3, SnapshotTime: 3 * time.Second, Acc: 0.5}, {GlobalRound: 6, SnapshotTime: 6 * time.Second, Acc: 0.6}}
	if _, err := WriteRun(dir, map[string]int{"ranks": 2}, before, evals, Ran{}); err != nil {
		t.Fatal(err)
	}
	own, err := metrics.OpenRankRecords(dir, 1) // rank 1's file, as the killed run left it
	if err != nil {
		t.Fatal(err)
	}
	for i := range before {
		if before[i].Rank == 1 {
			if err := own.WriteRound(&before[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	own.Close()

	kept, _, err := RewindRun(dir, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != 8 {
		t.Fatalf("kept %d records, want the 8 of rounds 0-3", len(kept))
	}
	if _, err := os.Stat(filepath.Join(dir, metrics.SummaryFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("summary.json of the run being continued: %v, want it removed", err)
	}
	f, err := os.Open(metrics.RankRecordsPath(dir, 1))
	if err != nil {
		t.Fatal(err)
	}
	ownKept, err := metrics.ReadRounds(f, "rank-1.jsonl")
	f.Close()
	if err != nil || len(ownKept) != 4 || ownKept[3].Round != 3 {
		t.Fatalf("rank 1's own file after the rewind: %d records (%v), want rounds 0-3", len(ownKept), err)
	}

	// The resumed run: rounds 4-8 and one more evaluation, appended to the same directory.
	live, err := openLiveRun(dir, 0, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	live.eval(EvalResult{GlobalRound: 9, SnapshotTime: 9 * time.Second, Acc: 0.7})
	var after []metrics.RoundRecord
	for round := 4; round < 9; round++ {
		after = append(after, rec(0, round), rec(1, round))
	}
	if _, err := live.finish(append(kept, after...), Ran{}); err != nil {
		t.Fatal(err)
	}
	_, rounds, ev, err := metrics.LoadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[[2]int]int{}
	for _, r := range rounds {
		seen[[2]int{r.Rank, r.Round}]++
	}
	if len(rounds) != 18 || len(seen) != 18 {
		t.Fatalf("%d records of %d distinct rounds, want 18 of 18", len(rounds), len(seen))
	}
	if len(ev) != 2 || ev[0].Round != 3 || ev[1].Round != 9 {
		t.Fatalf("evaluations %+v, want rounds 3 and 9", ev)
	}
	if entries, _ := filepath.Glob(filepath.Join(dir, "*", ".*.tmp-*")); len(entries) != 0 {
		t.Fatalf("left behind %v", entries)
	}
	for _, p := range []string{filepath.Join(dir, metrics.EvalFile), metrics.RankRecordsPath(dir, 1)} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s rewritten with mode %v (%v), want 0644 as the run's other files", p, fi.Mode().Perm(), err)
		}
	}
}

// TestEveryStrategySaysWhetherItCheckpoints: each built-in strategy, over each collective it
// supports, either implements Checkpointer or says why it cannot.
func TestEveryStrategySaysWhetherItCheckpoints(t *testing.T) {
	reg := Builtin()
	for _, name := range reg.Names() {
		for _, coll := range []string{"", "ring", "ps"} {
			cfg := Config{Strategy: name, Collective: coll, MaxRounds: 3}
			cfg.Defaults()
			strat, err := reg.New(&cfg)
			if err != nil {
				continue // a collective the strategy does not run over
			}
			cp, can := strat.(Checkpointer)
			_, cannot := strat.(noCheckpoint)
			if can == cannot {
				t.Errorf("--sync %s --collective %s: Checkpointer %v, NoCheckpoint %v; want exactly one", name, cfg.Collective, can, cannot)
			}
			// A per-rank checkpoint holds each rank's own state, which no rank of another
			// world size has.
			if _, perRank := strat.(PerRankCheckpointer); perRank && cp.Resizable() {
				t.Errorf("--sync %s --collective %s: per-rank checkpoints, yet Resizable", name, cfg.Collective)
			}
		}
	}
}
