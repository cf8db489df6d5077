package trainer

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hetsync/hetsync/metrics"
)

// PerRankCheckpointer is a Checkpointer whose ranks hold different state after a round (their
// own momentum, data position, timings) but end every round together, at one agreed round
// count. Each rank writes its own part of a checkpoint; the checkpoint counts once every
// rank's part of the same round is durable, which rank 0's manifest then says.
type PerRankCheckpointer interface {
	Checkpointer
	// PerRankCheckpoint marks the strategy; its state needs no further method.
	PerRankCheckpoint()
}

// CheckpointManifestFile names, in a run directory, the last per-rank checkpoint whose parts
// are all durable; CheckpointPartsDir holds the parts.
const (
	CheckpointManifestFile = "checkpoint.json"
	CheckpointPartsDir     = "checkpoints"
)

// CheckpointManifest is what rank 0 writes, last, once every rank's part of Round is durable.
type CheckpointManifest struct {
	Strategy  string `json:"strategy"`
	WorldSize int    `json:"world_size"`
	Seed      uint64 `json:"seed"`
	Round     int    `json:"round"`
	// Parts are the ranks' files, relative to the run directory, rank 0's first.
	Parts []string `json:"parts"`
}

// checkpointPart is rank's part of the checkpoint of round (rounds completed) in run
// directory dir. The round is in the name, so that a crash while the parts of a newer
// checkpoint are written leaves the parts the manifest names untouched.
func checkpointPart(rank, round int) string {
	return filepath.Join(CheckpointPartsDir, fmt.Sprintf("rank-%d.round-%d.ckpt", rank, round))
}

// HasCheckpoint reports, as an error naming the file, why run directory dir holds no
// checkpoint to resume from: neither a whole checkpoint nor a manifest of per-rank parts.
func HasCheckpoint(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, CheckpointManifestFile)); err == nil {
		_, err := readManifest(dir)
		return err
	}
	_, err := ReadCheckpoint(dir)
	return err
}

// LoadCheckpoint reads what rank continues from in run directory dir: its own part of the
// per-rank checkpoint the manifest names, or else the whole checkpoint rank 0 wrote. It
// returns the file it read, for errors.
func LoadCheckpoint(dir string, rank int) (*Checkpoint, string, error) {
	if _, err := os.Stat(filepath.Join(dir, CheckpointManifestFile)); err != nil {
		ck, err := ReadCheckpoint(dir)
		return ck, CheckpointPath(dir), err
	}
	m, err := readManifest(dir)
	if err != nil {
		return nil, "", err
	}
	if rank >= m.WorldSize {
		return nil, "", fmt.Errorf("trainer: rank %d: checkpoint %s was written by %d ranks and holds no part for rank %d",
			rank, filepath.Join(dir, CheckpointManifestFile), m.WorldSize, rank)
	}
	file := filepath.Join(dir, m.Parts[rank])
	ck, err := readCheckpointFile(file)
	if err != nil {
		return nil, file, fmt.Errorf("trainer: rank %d: its part of the checkpoint of round %d: %w", rank, m.Round, err)
	}
	h := &ck.CheckpointHeader
	switch {
	case h.Rank == nil || *h.Rank != rank:
		return nil, file, fmt.Errorf("trainer: rank %d: checkpoint part %s is not rank %d's", rank, file, rank)
	case h.Round != m.Round || h.WorldSize != m.WorldSize || h.Strategy != m.Strategy || h.Seed != m.Seed:
		return nil, file, fmt.Errorf("trainer: rank %d: checkpoint part %s is of round %d of %d ranks (strategy %s, seed %d), the manifest names round %d of %d (strategy %s, seed %d)",
			rank, file, h.Round, h.WorldSize, h.Strategy, h.Seed, m.Round, m.WorldSize, m.Strategy, m.Seed)
	}
	return ck, file, nil
}

// readManifest reads and checks dir's CheckpointManifestFile.
func readManifest(dir string) (*CheckpointManifest, error) {
	path := filepath.Join(dir, CheckpointManifestFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("trainer: checkpoint: %w", err)
	}
	var m CheckpointManifest
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("trainer: checkpoint manifest %s: %w", path, err)
	}
	if m.WorldSize < 1 || m.Round < 1 || len(m.Parts) != m.WorldSize {
		return nil, fmt.Errorf("trainer: checkpoint manifest %s names %d parts for %d ranks at round %d", path, len(m.Parts), m.WorldSize, m.Round)
	}
	for r, p := range m.Parts {
		if p != checkpointPart(r, m.Round) {
			return nil, fmt.Errorf("trainer: checkpoint manifest %s: rank %d's part is %q, want %q", path, r, p, checkpointPart(r, m.Round))
		}
	}
	return &m, nil
}

// sharePerRankPlan gives every rank rank 0's checkpoint directory and period, so that the
// ranks write their parts after the same rounds into one run directory, and checks that
// every rank resumes from the same round as rank 0. Every rank of a PerRankCheckpointer calls
// it, with checkpoints or without: a rank that alone had none would leave the others waiting
// for its part.
func sharePerRankPlan(ctx context.Context, w *Worker, o CheckpointOptions) (CheckpointOptions, error) {
	const maxPath = 4096
	resumed := int64(-1)
	if o.Resume != nil {
		resumed = int64(o.Resume.Round)
	}
	if w.Rank == 0 {
		if len(o.Dir) > maxPath {
			return o, fmt.Errorf("trainer: rank 0: checkpoint directory path of %d bytes is too long", len(o.Dir))
		}
		msg := binary.LittleEndian.AppendUint64(nil, uint64(o.Every.Rounds))
		msg = binary.LittleEndian.AppendUint64(msg, uint64(o.Every.Interval))
		msg = binary.LittleEndian.AppendUint64(msg, uint64(resumed))
		msg = append(msg, o.Dir...)
		for r := 1; r < w.Size; r++ {
			if err := controlSend(ctx, w.Endpoint, r, ctrlCkptPlan, msg); err != nil {
				return o, fmt.Errorf("trainer: rank 0: sending the checkpoint plan to rank %d: %w", r, err)
			}
		}
		return o, nil
	}
	buf := make([]byte, 24+maxPath)
	n, err := controlRecv(ctx, w.Endpoint, 0, ctrlCkptPlan, buf)
	if err != nil {
		return o, fmt.Errorf("trainer: rank %d: receiving the checkpoint plan from rank 0: %w", w.Rank, err)
	}
	if n < 24 {
		return o, fmt.Errorf("trainer: rank %d: a checkpoint plan of %d bytes from rank 0", w.Rank, n)
	}
	o.Every.Rounds = int(binary.LittleEndian.Uint64(buf))
	o.Every.Interval = time.Duration(binary.LittleEndian.Uint64(buf[8:]))
	o.Dir = string(buf[24:n])
	if r0 := int64(binary.LittleEndian.Uint64(buf[16:])); r0 != resumed {
		return o, fmt.Errorf("trainer: rank %d: rank 0 resumes after round %d and this rank after round %d (-1: none): every rank must resume from its part of the same checkpoint", w.Rank, r0, resumed)
	}
	return o, nil
}

// agreeCheckpointDue makes rank 0's decision whether a per-rank checkpoint is due after this
// round every rank's: a period in rounds every rank counts alike, but a period in time only
// rank 0's clock decides.
func agreeCheckpointDue(ctx context.Context, w *Worker, due bool) (bool, error) {
	b := []byte{0}
	if w.Rank != 0 {
		if _, err := controlRecv(ctx, w.Endpoint, 0, ctrlCkptDue, b); err != nil {
			return false, fmt.Errorf("trainer: rank %d: waiting for rank 0's checkpoint decision: %w", w.Rank, err)
		}
		return b[0] == 1, nil
	}
	if due {
		b[0] = 1
	}
	for r := 1; r < w.Size; r++ {
		if err := controlSend(ctx, w.Endpoint, r, ctrlCkptDue, b); err != nil {
			return false, fmt.Errorf("trainer: rank 0: sending the checkpoint decision to rank %d: %w", r, err)
		}
	}
	return due, nil
}

// saveRankCheckpoint writes this rank's part of the checkpoint after round (0-based) into
// run directory dir, and commits it with the other ranks: once every part is durable (a
// barrier), rank 0 replaces the manifest; once it has (a second barrier), each rank removes
// its older parts. A crash at any point leaves the previous manifest and the parts it names.
func saveRankCheckpoint(ctx context.Context, dir string, w *Worker, cp Checkpointer, round int, st RoundStats, elapsed time.Duration) error {
	state, err := cp.CheckpointState(w)
	if err != nil {
		return fmt.Errorf("trainer: rank %d: checkpoint after round %d: %w", w.Rank, round, err)
	}
	rank := w.Rank
	ck := newCheckpoint(w, state, round, st, elapsed)
	ck.Rank = &rank
	part := checkpointPart(rank, round+1)
	if err := writeCheckpointFile(filepath.Join(dir, part), ck); err != nil {
		return fmt.Errorf("rank %d: after round %d: %w", rank, round, err)
	}
	if err := controlBarrier(ctx, w.Endpoint, ctrlCkptWritten, fmt.Sprintf("checkpoint after round %d: waiting for every part", round)); err != nil {
		return err
	}
	if rank == 0 {
		if err := writeManifest(dir, w, round+1); err != nil {
			return fmt.Errorf("trainer: rank 0: checkpoint after round %d: %w", round, err)
		}
	}
	if err := controlBarrier(ctx, w.Endpoint, ctrlCkptCommitted, fmt.Sprintf("checkpoint after round %d: waiting for the manifest", round)); err != nil {
		return err
	}
	return removeOlderParts(dir, rank, part)
}

// writeManifest replaces dir's manifest with one naming the parts of rounds.
func writeManifest(dir string, w *Worker, rounds int) error {
	m := CheckpointManifest{Strategy: w.Cfg.Strategy, WorldSize: w.Size, Seed: w.Cfg.Seed, Round: rounds}
	for r := range w.Size {
		m.Parts = append(m.Parts, checkpointPart(r, rounds))
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := metrics.ReplaceFile(filepath.Join(dir, CheckpointManifestFile), func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	}); err != nil {
		return err
	}
	return syncDir(dir)
}

// removeOlderParts removes rank's parts other than keep, which the manifest now names.
func removeOlderParts(dir string, rank int, keep string) error {
	old, err := filepath.Glob(filepath.Join(dir, CheckpointPartsDir, fmt.Sprintf("rank-%d.round-*.ckpt", rank)))
	if err != nil {
		return fmt.Errorf("trainer: rank %d: %w", rank, err)
	}
	for _, p := range old {
		if p == filepath.Join(dir, keep) {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("trainer: rank %d: removing an older checkpoint part: %w", rank, err)
		}
	}
	return nil
}
