package experiment

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/report"
)

// Runner executes the runs of a Spec.
type Runner struct {
	// Exe is the hetsync binary that runs `train` (normally os.Executable()).
	Exe string
	// Out is the experiment's directory: OUT/NAME per run, OUT/logs, OUT/report.
	Out string
	// Progress receives one line per run started and finished (and the dry run's commands).
	Progress io.Writer
	// DryRun prints the command lines instead of running them.
	DryRun bool
	// Env is the children's environment; nil means this process's.
	Env []string
	// StopGrace is how long a run past its timeout (or interrupted) has after SIGTERM before
	// it is killed; 0 means 15 s.
	StopGrace time.Duration
}

// Result is what an experiment did.
type Result struct {
	Runs []RunResult
	// ReportDir is OUT/report when a report was written.
	ReportDir string
}

// RunResult is one run's outcome.
type RunResult struct {
	Name     string
	Dir      string
	Log      string
	Args     []string
	Duration time.Duration
	Err      error // nil when the run finished
	// NotStarted is set for a run the experiment was interrupted before: it did not fail.
	NotStarted bool
}

// Failed lists the runs that started and did not finish.
func (r Result) Failed() []string {
	return r.names(func(rr RunResult) bool { return rr.Err != nil && !rr.NotStarted })
}

// NotStarted lists the runs an interrupt kept from starting.
func (r Result) NotStarted() []string {
	return r.names(func(rr RunResult) bool { return rr.NotStarted })
}

func (r Result) names(keep func(RunResult) bool) []string {
	var names []string
	for _, rr := range r.Runs {
		if keep(rr) {
			names = append(names, rr.Name)
		}
	}
	return names
}

// ShellQuote renders args as one shell command line.
func ShellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}) < 0 {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

// Commands returns each run's full command line (the dry run's output).
func (rn *Runner) Commands(spec *Spec) [][]string {
	out := make([][]string, len(spec.Runs))
	for i, r := range spec.Runs {
		out[i] = spec.Command(rn.Exe, r, filepath.Join(rn.Out, r.Name))
	}
	return out
}

// Run executes every run of spec in order, then writes the report over the runs that
// finished. It returns an error naming the failed runs when any failed; the Result is valid
// either way.
func (rn *Runner) Run(ctx context.Context, spec *Spec) (Result, error) {
	var res Result
	progress := rn.Progress
	if progress == nil {
		progress = io.Discard
	}
	if rn.Exe == "" || rn.Out == "" {
		return res, errors.New("experiment: Runner needs Exe and Out")
	}
	if rn.DryRun {
		for i, cmd := range rn.Commands(spec) {
			fmt.Fprintf(progress, "# [%d/%d] %s (timeout %v)\n%s\n", i+1, len(spec.Runs), spec.Runs[i].Name, spec.RunTimeout(spec.Runs[i]), ShellQuote(cmd))
		}
		fmt.Fprintf(progress, "# then: %s\n", ShellQuote(rn.reportCommand(spec)))
		return res, nil
	}
	for _, r := range spec.Runs {
		dir := filepath.Join(rn.Out, r.Name)
		if _, err := os.Stat(filepath.Join(dir, metrics.ConfigFile)); err == nil {
			return res, fmt.Errorf("experiment %s: %s already holds a run; choose a new --out", spec.File, dir)
		}
	}
	logs := filepath.Join(rn.Out, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return res, fmt.Errorf("experiment: %w", err)
	}
	for i, r := range spec.Runs {
		if err := ctx.Err(); err != nil {
			fmt.Fprintf(progress, "[%d/%d] %s: not started: %v\n", i+1, len(spec.Runs), r.Name, err)
			res.Runs = append(res.Runs, RunResult{Name: r.Name, Err: fmt.Errorf("not started: %w", err), NotStarted: true})
			continue
		}
		rr := RunResult{Name: r.Name, Dir: filepath.Join(rn.Out, r.Name), Log: filepath.Join(logs, r.Name+".log")}
		rr.Args = spec.Command(rn.Exe, r, rr.Dir)
		fmt.Fprintf(progress, "[%d/%d] %s: %s\n", i+1, len(spec.Runs), r.Name, ShellQuote(rr.Args))
		start := time.Now()
		rr.Err = rn.runOne(ctx, rr, spec.RunTimeout(r))
		rr.Duration = time.Since(start)
		if rr.Err == nil {
			if _, err := os.Stat(filepath.Join(rr.Dir, metrics.SummaryFile)); err != nil {
				rr.Err = fmt.Errorf("train exited 0 but wrote no %s", metrics.SummaryFile)
			}
		}
		if rr.Err != nil {
			fmt.Fprintf(progress, "[%d/%d] %s: FAILED after %.1fs: %v (log %s)\n%s", i+1, len(spec.Runs), r.Name,
				rr.Duration.Seconds(), rr.Err, rr.Log, logTail(rr.Log, 6))
		} else {
			fmt.Fprintf(progress, "[%d/%d] %s: done in %.1fs%s\n", i+1, len(spec.Runs), r.Name, rr.Duration.Seconds(), brief(rr.Dir))
		}
		res.Runs = append(res.Runs, rr)
	}
	var done []string
	for _, rr := range res.Runs {
		if rr.Err == nil {
			done = append(done, rr.Dir)
		}
	}
	var errs []error
	if len(done) > 0 {
		repDir := filepath.Join(rn.Out, "report")
		baseline := spec.Baseline
		if baseline != "" && !contains(done, filepath.Join(rn.Out, baseline)) {
			fmt.Fprintf(progress, "baseline run %s failed; speedups use the default baseline\n", baseline)
			baseline = ""
		}
		rep, err := report.Write(repDir, done, baseline)
		if err != nil {
			errs = append(errs, fmt.Errorf("experiment %s: report: %w", spec.File, err))
		} else {
			res.ReportDir = repDir
			fmt.Fprintf(progress, "report: %s (%d runs, %d figures)\n", filepath.Join(repDir, report.MarkdownFile), len(rep.Rows), len(rep.Figures))
		}
	}
	if failed := res.Failed(); len(failed) > 0 {
		errs = append(errs, fmt.Errorf("experiment %s: %d of %d runs failed: %s (logs in %s)", spec.File, len(failed), len(spec.Runs), strings.Join(failed, ", "), logs))
	}
	if skipped := res.NotStarted(); len(skipped) > 0 {
		errs = append(errs, fmt.Errorf("experiment %s: interrupted before %d of %d runs started: %s", spec.File, len(skipped), len(spec.Runs), strings.Join(skipped, ", ")))
	}
	return res, errors.Join(errs...)
}

func (rn *Runner) reportCommand(spec *Spec) []string {
	cmd := []string{rn.Exe, "report"}
	for _, r := range spec.Runs {
		cmd = append(cmd, filepath.Join(rn.Out, r.Name))
	}
	cmd = append(cmd, "--out="+filepath.Join(rn.Out, "report"))
	if spec.Baseline != "" {
		cmd = append(cmd, "--baseline="+spec.Baseline)
	}
	return cmd
}

// runOne runs one train process with its output in rr.Log, stopping it (SIGTERM to its
// process group, then SIGKILL after StopGrace) at the timeout or when ctx ends.
func (rn *Runner) runOne(ctx context.Context, rr RunResult, timeout time.Duration) error {
	logf, err := os.Create(rr.Log)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "$ %s\n", ShellQuote(rr.Args))
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(rctx, rr.Args[0], rr.Args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = rn.Env
	grace := rn.StopGrace
	if grace <= 0 {
		grace = 15 * time.Second
	}
	setStopGroup(cmd, grace)
	err = cmd.Run()
	if rctx.Err() != nil {
		killGroup(cmd)
	}
	switch {
	case errors.Is(rctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		return fmt.Errorf("timed out after %v", timeout)
	case ctx.Err() != nil:
		return fmt.Errorf("interrupted: %w", ctx.Err())
	case err != nil:
		return err
	}
	return nil
}

// brief summarises a finished run for the progress line.
func brief(dir string) string {
	run, err := report.LoadRun(dir)
	if err != nil {
		return ""
	}
	s := run.Summary
	out := fmt.Sprintf(": final accuracy %.4f, %.0f samples/s", s.FinalAccuracy, s.Throughput)
	if t, ok := s.TimeToAccuracy[metrics.TargetKey(0.80)]; ok {
		out += fmt.Sprintf(", 0.80 at %.1fs", t)
	}
	return out
}

// logTail returns the last n lines of the log, indented: read from its last 64 KiB, as a
// run's log may be long.
func logTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const tail = 64 << 10
	if end, err := f.Seek(0, io.SeekEnd); err == nil && end > tail {
		_, err = f.Seek(end-tail, io.SeekStart)
	} else {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		return ""
	}
	b, err := io.ReadAll(io.LimitReader(f, tail))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(bytes.TrimSpace(b)), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var sb strings.Builder
	for _, l := range lines {
		sb.WriteString("    | " + l + "\n")
	}
	return sb.String()
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
