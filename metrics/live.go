package metrics

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// RankRecordsPath is dir/ranks/rank-N.jsonl, where rank N appends its own records.
func RankRecordsPath(dir string, rank int) string {
	return filepath.Join(dir, RanksDir, "rank-"+strconv.Itoa(rank)+".jsonl")
}

// RankRecords is one rank's own metrics file, written as the job runs: each round is one
// write(2) of one line, so what a rank measured is on disk as soon as the round ends and a
// killed job leaves it behind. A rank on another host than rank 0 keeps its file as a local
// copy of what it also sends to rank 0 at the end.
type RankRecords struct {
	Path string
	f    *os.File
	w    *Writer
}

// OpenRankRecords creates dir/ranks (and dir) and opens rank's file for appending.
func OpenRankRecords(dir string, rank int) (*RankRecords, error) {
	if rank < 0 {
		return nil, fmt.Errorf("metrics: run dir %s: rank %d < 0", dir, rank)
	}
	if err := os.MkdirAll(filepath.Join(dir, RanksDir), 0o755); err != nil {
		return nil, fmt.Errorf("metrics: rank %d: %w", rank, err)
	}
	path := RankRecordsPath(dir, rank)
	f, err := openAppend(path)
	if err != nil {
		return nil, fmt.Errorf("metrics: rank %d: %w", rank, err)
	}
	return &RankRecords{Path: path, f: f, w: NewWriter(f)}, nil
}

// WriteRound appends rec; an error names the file (the os error does).
func (r *RankRecords) WriteRound(rec *RoundRecord) error { return r.w.WriteRound(rec) }

// Close closes the file; it is safe to call more than once.
func (r *RankRecords) Close() error {
	if r == nil || r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

// EarlyEnd is summary.json's account of a run that stopped before its stop rule did: an
// interrupt, a failed or killed rank, a timeout.
type EarlyEnd struct {
	// Reason is what stopped it, as the rank or launcher that saw it said.
	Reason string `json:"reason"`
	// Round is the highest round any rank recorded, -1 when none did.
	Round int `json:"round"`
	// InProgress is set when the run has not ended at all: a job still holds its run
	// directory (LockHolder), and Reason names it. Its numbers are those of a run so far.
	InProgress bool `json:"in_progress,omitempty"`
}

// String is "ended early at round R (reason)".
func (e EarlyEnd) String() string {
	if e.InProgress {
		if e.Round < 0 {
			return "is still running, before any round (" + e.Reason + ")"
		}
		return fmt.Sprintf("is still running, at round %d (%s)", e.Round, e.Reason)
	}
	if e.Round < 0 {
		return "ended early before any round (" + e.Reason + ")"
	}
	return fmt.Sprintf("ended early at round %d (%s)", e.Round, e.Reason)
}

// Interrupted begins the reason of a run whose rank 0 was stopped from outside (a signal, a
// cancelled context) rather than failing itself: whoever stopped it may know better why.
const Interrupted = "interrupted: "

// NoSummaryReason is the reason a run directory without summary.json ended early for: nobody
// was left to write one (the process that would have was killed too).
const NoSummaryReason = "no summary.json: the job was stopped before it could write one"

// EndEarly closes a run directory that a job left without a summary: metrics.jsonl, when
// empty, is filled from the ranks' own files (ranks/), and summary.json is written with
// EndedEarly saying why. A directory that already has summary.json is left as it is (the
// first to close a run knows best why it ended), and its summary returned.
func EndEarly(dir, reason string) (Summary, error) {
	if s, err := ReadSummary(dir); err == nil {
		return s, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return Summary{}, err
	}
	cfg, rounds, evals, err := LoadRun(dir)
	if err != nil {
		return Summary{}, err
	}
	mPath := filepath.Join(dir, MetricsFile)
	if fi, err := os.Stat(mPath); err != nil || fi.Size() == 0 {
		if err := writeRoundsFile(mPath, rounds); err != nil {
			return Summary{}, err
		}
	}
	s := Summarize(cfg, rounds, evals)
	s.EndedEarly = &EarlyEnd{Reason: reason, Round: lastRound(rounds)}
	return s, WriteSummary(dir, s)
}

// ReadSummary reads dir/summary.json.
func ReadSummary(dir string) (Summary, error) {
	path := filepath.Join(dir, SummaryFile)
	b, err := ReadFileLimit(path, MaxConfigBytes)
	if err != nil {
		return Summary{}, fmt.Errorf("metrics: %w", err)
	}
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil {
		return Summary{}, fmt.Errorf("metrics: %s: %w", path, err)
	}
	return s, nil
}

// Ending says how the run in dir ended: its summary.json's EndedEarly when it has one, and
// an EarlyEnd with NoSummaryReason when it has neither summary.json nor gathered records in
// metrics.jsonl (what a job killed with its launcher leaves), or with InProgress set when a
// job still holds the directory (it is training into it now); otherwise nil, a run that ran
// to its end. rounds are the run's records, for the round of the last case. A summary.json
// that does not parse says nothing: the records, not it, are what a run measured.
func Ending(dir string, rounds []RoundRecord) *EarlyEnd {
	s, err := ReadSummary(dir)
	if err == nil {
		return s.EndedEarly
	}
	if fi, serr := os.Stat(filepath.Join(dir, MetricsFile)); errors.Is(err, os.ErrNotExist) && (serr != nil || fi.Size() == 0) {
		if pid, held := LockHolder(dir); held {
			job := "a job"
			if pid > 0 {
				job = fmt.Sprintf("the job of pid %d", pid)
			}
			return &EarlyEnd{Reason: "no summary.json yet: " + job + " still holds the run directory", Round: lastRound(rounds), InProgress: true}
		}
		return &EarlyEnd{Reason: NoSummaryReason, Round: lastRound(rounds)}
	}
	return nil
}

func lastRound(rounds []RoundRecord) int {
	last := -1
	for _, r := range rounds {
		last = max(last, r.Round)
	}
	return last
}

// writeRoundsFile writes rounds, by rank then round, to path through a temporary file, so
// that path is never half written.
func writeRoundsFile(path string, rounds []RoundRecord) error {
	err := ReplaceFile(path, func(f io.Writer) error {
		w := NewWriter(f)
		for i := range rounds {
			if err := w.WriteRound(&rounds[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// readRankFiles reads every ranks/rank-N.jsonl of dir, sorted by rank then round; a directory
// without ranks/ reads as no records. A file's records must all be of its own rank.
func readRankFiles(dir string) ([]RoundRecord, error) {
	entries, err := os.ReadDir(filepath.Join(dir, RanksDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	var all []RoundRecord
	for _, e := range entries {
		num, ok := strings.CutPrefix(e.Name(), "rank-")
		num, ok2 := strings.CutSuffix(num, ".jsonl")
		rank, err := strconv.Atoi(num)
		if !ok || !ok2 || err != nil || rank < 0 || e.IsDir() {
			continue
		}
		path := filepath.Join(dir, RanksDir, e.Name())
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		recs, err := readRounds(f, path, true)
		f.Close()
		if err == nil {
			err = checkOnce(path, recs)
		}
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			if r.Rank != rank {
				return nil, fmt.Errorf("metrics: %s holds a record of rank %d (round %d)", path, r.Rank, r.Round)
			}
		}
		all = append(all, recs...)
	}
	slices.SortStableFunc(all, func(a, b RoundRecord) int {
		return cmp.Or(cmp.Compare(a.Rank, b.Rank), cmp.Compare(a.Round, b.Round))
	})
	return all, nil
}
