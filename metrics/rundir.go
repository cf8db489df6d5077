package metrics

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Files of a run directory.
const (
	ConfigFile  = "config.json"
	MetricsFile = "metrics.jsonl"
	EvalFile    = "eval.jsonl"
	SummaryFile = "summary.json"
	LogsDir     = "logs"
	// RanksDir holds each rank's own records, appended as the job runs (rank-N.jsonl).
	RanksDir = "ranks"
	// LockFile is the lock of the job that owns the run directory (hetsync train holds an
	// flock on it for the job's life); it holds that job's pid.
	LockFile = "run.lock"
)

// MaxConfigBytes bounds what is read of a run's config.json or summary.json: each is a few
// kilobytes, and a run directory is user input (a file linked to a device must not take all
// memory).
const MaxConfigBytes = 16 << 20

// RunPath returns root/name-YYYYMMDD-HHMMSS (UTC), the default place of a new run.
func RunPath(root, name string, start time.Time) string {
	return filepath.Join(root, name+"-"+start.UTC().Format("20060102-150405"))
}

// RunDir is an open run directory on the host that gathers the results (rank 0):
//
//	config.json    the run's configuration, as given to CreateRunDir
//	metrics.jsonl  one RoundRecord per line, all ranks
//	eval.jsonl     one EvalRecord per line
//	summary.json   Summarize's result, written by Finish (or EndEarly)
//	logs/          per-rank output (rank-N.log)
//	ranks/         each rank's records as it measured them (rank-N.jsonl, OpenRankRecords)
//	run.lock       the pid of the job that owns the directory (LockFile)
type RunDir struct {
	Path    string
	metrics *os.File
	evals   *os.File
	mw, ew  *Writer
}

// CreateRunDir creates path (and parents), writes config.json and opens the record files. A
// directory that already holds a run (config.json) is an error, so no result is overwritten.
func CreateRunDir(path string, config any) (*RunDir, error) {
	cfg, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("metrics: run dir %s: encoding config: %w", path, err)
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, fmt.Errorf("metrics: run dir: %w", err)
	}
	cfgPath := filepath.Join(path, ConfigFile)
	f, err := os.OpenFile(cfgPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("metrics: run dir %s already holds a run (%s exists); choose a new directory", path, ConfigFile)
		}
		return nil, fmt.Errorf("metrics: run dir: %w", err)
	}
	_, err = f.Write(append(cfg, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("metrics: %s: %w", cfgPath, err)
	}
	return openRecords(path)
}

// OpenRunDir opens the record files of a run directory that already holds a run (config.json),
// to append to them: a run resumed from a checkpoint continues its own directory.
func OpenRunDir(path string) (*RunDir, error) {
	if _, err := os.Stat(filepath.Join(path, ConfigFile)); err != nil {
		return nil, fmt.Errorf("metrics: run dir %s holds no run to continue: %w", path, err)
	}
	return openRecords(path)
}

// openRecords creates the subdirectories of the run directory path and opens its record files
// for appending.
func openRecords(path string) (*RunDir, error) {
	for _, sub := range []string{LogsDir, RanksDir} {
		if err := os.MkdirAll(filepath.Join(path, sub), 0o755); err != nil {
			return nil, fmt.Errorf("metrics: run dir: %w", err)
		}
	}
	d := &RunDir{Path: path}
	var err error
	if d.metrics, err = openAppend(filepath.Join(path, MetricsFile)); err != nil {
		return nil, err
	}
	if d.evals, err = openAppend(filepath.Join(path, EvalFile)); err != nil {
		d.metrics.Close()
		return nil, err
	}
	d.mw, d.ew = NewWriter(d.metrics), NewWriter(d.evals)
	return d, nil
}

func openAppend(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return f, nil
}

// Metrics is the writer of metrics.jsonl.
func (d *RunDir) Metrics() *Writer { return d.mw }

// Evals is the writer of eval.jsonl.
func (d *RunDir) Evals() *Writer { return d.ew }

// RankLog creates logs/rank-N.log for a rank's output.
func (d *RunDir) RankLog(rank int) (*os.File, error) {
	if rank < 0 {
		return nil, fmt.Errorf("metrics: run dir %s: rank %d < 0", d.Path, rank)
	}
	return openAppend(filepath.Join(d.Path, LogsDir, fmt.Sprintf("rank-%d.log", rank)))
}

// Close closes the record files. It is safe to call more than once.
func (d *RunDir) Close() error {
	var errs []error
	for _, f := range []**os.File{&d.metrics, &d.evals} {
		if *f != nil {
			errs = append(errs, (*f).Close())
			*f = nil
		}
	}
	return errors.Join(errs...)
}

// Finish closes the record files, reads the run back, writes summary.json and returns it.
func (d *RunDir) Finish() (Summary, error) {
	if err := d.Close(); err != nil {
		return Summary{}, fmt.Errorf("metrics: run dir %s: %w", d.Path, err)
	}
	cfg, rounds, evals, err := LoadRun(d.Path)
	if err != nil {
		return Summary{}, err
	}
	s := Summarize(cfg, rounds, evals)
	return s, WriteSummary(d.Path, s)
}

// WriteSummary writes dir/summary.json atomically (temporary file, then rename).
func WriteSummary(dir string, s Summary) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("metrics: %s: %w", filepath.Join(dir, SummaryFile), err)
	}
	err = ReplaceFile(filepath.Join(dir, SummaryFile), func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// checkOnce refuses a file that records one rank's round twice: two jobs that wrote into one
// run directory (two resumes of one run) leave such a file, and summed, its throughput would
// be doubled and its ratios meaningless. A resumed run drops the rounds after its checkpoint
// before it trains them again, so a run of one job at a time never has one.
func checkOnce(path string, rounds []RoundRecord) error {
	seen := make(map[[2]int]struct{}, len(rounds))
	for _, r := range rounds {
		k := [2]int{r.Rank, r.Round}
		if _, dup := seen[k]; dup {
			return fmt.Errorf("metrics: %s records rank %d's round %d more than once: two jobs wrote into this run directory", path, r.Rank, r.Round)
		}
		seen[k] = struct{}{}
	}
	return nil
}

// LoadRun reads config.json, metrics.jsonl and eval.jsonl of a run directory. A missing
// eval.jsonl reads as no evaluations; a metrics.jsonl that is missing or empty (a job that
// ended before rank 0 gathered the ranks' records) reads the ranks' own files under ranks/
// instead; a missing config.json is an error, and so is a run with neither.
func LoadRun(dir string) (config json.RawMessage, rounds []RoundRecord, evals []EvalRecord, err error) {
	cfgPath := filepath.Join(dir, ConfigFile)
	config, err = ReadFileLimit(cfgPath, MaxConfigBytes)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("metrics: %w", err)
	}
	if !json.Valid(config) {
		return nil, nil, nil, fmt.Errorf("metrics: %s is not valid JSON", cfgPath)
	}
	mPath := filepath.Join(dir, MetricsFile)
	mf, err := os.Open(mPath)
	switch {
	case err == nil:
		rounds, err = ReadRounds(mf, mPath)
		mf.Close()
		if err == nil {
			err = checkOnce(mPath, rounds)
		}
		if err != nil {
			return nil, nil, nil, err
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, nil, nil, fmt.Errorf("metrics: %w", err)
	}
	if len(rounds) == 0 {
		if rounds, err = readRankFiles(dir); err != nil {
			return nil, nil, nil, err
		}
		if len(rounds) == 0 && mf == nil {
			return nil, nil, nil, fmt.Errorf("metrics: run %s has neither %s nor records under %s/", dir, MetricsFile, RanksDir)
		}
	}
	ePath := filepath.Join(dir, EvalFile)
	ef, err := os.Open(ePath)
	if errors.Is(err, os.ErrNotExist) {
		return config, rounds, nil, nil
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("metrics: %w", err)
	}
	defer ef.Close()
	if evals, err = readEvals(ef, ePath, true); err != nil {
		return nil, nil, nil, err
	}
	return config, rounds, evals, nil
}
