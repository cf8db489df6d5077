package trainer

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/hetsync/hetsync/metrics"
)

// CheckpointFile is the name of a run directory's checkpoint: the newest one replaces the
// previous one atomically, so the file is always a whole checkpoint or absent.
const CheckpointFile = "checkpoint.ckpt"

// checkpointMagic opens every checkpoint file; the number after it is the format's version.
// Version 2 holds any optimizer's state where version 1, which ReadCheckpoint still reads,
// held SGD's velocity as float32 values: the same bytes, so a version 1 file reads as the
// state of sgd.
const (
	checkpointMagic   = "hetsync-checkpoint 2\n"
	checkpointMagicV1 = "hetsync-checkpoint 1\n"
)

// maxCheckpointHeader bounds the JSON header line, so a corrupt file cannot make the reader
// buffer without limit before it finds the line's end.
const maxCheckpointHeader = 64 << 10

// Checkpoint is the state of a training job at a round boundary, from which Run continues
// with no round lost or repeated. It is written by rank 0 for strategies whose every rank
// holds the same state at a round boundary (see Checkpointer), so one file is a consistent
// cut of the whole job; for a PerRankCheckpointer it is one rank's part (Rank set).
type Checkpoint struct {
	CheckpointHeader
	// Params is the model; OptimizerState the state of the workers' optimizer (Optimizer's
	// AppendState: SGD's velocity, Adam's step count and moments; empty before a first step
	// and for SGD without momentum).
	Params         []float32
	OptimizerState []byte
	// State is the strategy's own state (Checkpointer.CheckpointState).
	State []byte
}

// CheckpointHeader is the checkpoint file's JSON header line: what the checkpoint belongs to,
// where the job was, and the lengths and checksum of the raw payload that follows it.
type CheckpointHeader struct {
	Strategy  string `json:"strategy"`
	WorldSize int    `json:"world_size"`
	Seed      uint64 `json:"seed"`
	// Round is the number of rounds completed: the resumed run's first round.
	Round int `json:"round"`
	// Steps is the number of local steps every rank had taken, which is each rank's position
	// in its data (a rank skips that many batches when it resumes).
	Steps uint64 `json:"steps"`
	// Rank is the rank whose part of a per-rank checkpoint this is (PerRankCheckpointer);
	// absent in a whole-job checkpoint written by rank 0.
	Rank          *int          `json:"rank,omitempty"`
	GlobalRounds  int           `json:"global_rounds"`
	GlobalSamples int64         `json:"global_samples"`
	Elapsed       time.Duration `json:"elapsed_ns"`
	// Optimizer is the workers' optimizer whose state the checkpoint holds (Config.Optimizer).
	Optimizer string `json:"optimizer"`
	// NumParams, OptimizerBytes and StateBytes are the payload's parts, in this order:
	// little-endian float32 parameters, the optimizer's state, then the strategy's bytes.
	NumParams      int `json:"num_params"`
	OptimizerBytes int `json:"optimizer_bytes"`
	StateBytes     int `json:"state_bytes"`
	// CRC32C is the Castagnoli CRC-32 of the payload.
	CRC32C uint32 `json:"crc32c"`

	// NumVelocity is version 1's count of SGD velocity values in place of Optimizer and
	// OptimizerBytes; reading a version 1 file turns it into those.
	NumVelocity int `json:"num_velocity,omitempty"`
	// version is the file's format version (1 or 2), which a strategy's own state may need
	// to read what an older version wrote.
	version int
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// payloadLen is the length of the raw payload the header announces.
func (h *CheckpointHeader) payloadLen() int64 {
	return 4*int64(h.NumParams) + int64(h.OptimizerBytes) + int64(h.StateBytes)
}

// WriteCheckpoint writes c atomically as dir/CheckpointFile: a temporary file in dir, synced,
// renamed over the previous checkpoint, then dir synced, so that a crash at any moment leaves
// either the previous checkpoint or this one, never a torn file.
func WriteCheckpoint(dir string, c *Checkpoint) error {
	return writeCheckpointFile(filepath.Join(dir, CheckpointFile), c)
}

// writeCheckpointFile writes c atomically as path and syncs its directory.
func writeCheckpointFile(path string, c *Checkpoint) error {
	dir := filepath.Dir(path)
	h := c.CheckpointHeader
	h.NumParams, h.OptimizerBytes, h.StateBytes, h.NumVelocity = len(c.Params), len(c.OptimizerState), len(c.State), 0
	payload := make([]byte, 0, h.payloadLen())
	payload = appendFloats(payload, c.Params)
	payload = append(payload, c.OptimizerState...)
	payload = append(payload, c.State...)
	h.CRC32C = crc32.Checksum(payload, castagnoli)
	head, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("trainer: checkpoint in %s: encoding the header: %w", dir, err)
	}
	err = metrics.ReplaceFile(path, func(w io.Writer) error {
		_, err := w.Write(slices.Concat([]byte(checkpointMagic), head, []byte{'\n'}, payload))
		return err
	})
	if err != nil {
		return fmt.Errorf("trainer: checkpoint: %w", err)
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("trainer: checkpoint directory %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("trainer: syncing checkpoint directory %s: %w", dir, err)
	}
	return nil
}

// ReadCheckpoint reads dir/CheckpointFile. A missing file is an error wrapping
// os.ErrNotExist; a file that is not a whole, uncorrupted checkpoint of this format is an
// error naming the file and what is wrong with it.
func ReadCheckpoint(dir string) (*Checkpoint, error) {
	return readCheckpointFile(filepath.Join(dir, CheckpointFile))
}

// readCheckpointFile reads the checkpoint file path.
func readCheckpointFile(path string) (*Checkpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trainer: checkpoint: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("trainer: checkpoint: %w", err)
	}
	c, err := decodeCheckpoint(bufio.NewReader(f), fi.Size())
	if err != nil {
		return nil, fmt.Errorf("trainer: checkpoint %s: %w", path, err)
	}
	return c, nil
}

// decodeCheckpoint reads a checkpoint of size bytes from r.
func decodeCheckpoint(r *bufio.Reader, size int64) (*Checkpoint, error) {
	magic := make([]byte, len(checkpointMagic))
	if _, err := io.ReadFull(r, magic); err != nil {
		return nil, errors.New("not a hetsync checkpoint (too short for its first line)")
	}
	version := 2
	if string(magic) == checkpointMagicV1 {
		version = 1
	} else if string(magic) != checkpointMagic {
		if bytes.HasPrefix(magic, []byte("hetsync-checkpoint ")) {
			return nil, fmt.Errorf("checkpoint format %q, this hetsync reads %q", bytes.TrimSpace(magic), checkpointMagic[:len(checkpointMagic)-1])
		}
		return nil, errors.New("not a hetsync checkpoint (wrong first line)")
	}
	var line []byte
	for {
		part, err := r.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > maxCheckpointHeader {
			return nil, fmt.Errorf("header line longer than %d bytes", maxCheckpointHeader)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, errors.New("truncated: the header line does not end")
		}
	}
	line = line[:len(line)-1]
	var c Checkpoint
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c.CheckpointHeader); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	h := &c.CheckpointHeader
	h.version = version
	if version == 1 {
		if h.Optimizer != "" || h.OptimizerBytes != 0 || h.NumVelocity < 0 {
			return nil, fmt.Errorf("header of a version 1 checkpoint holds an impossible value: %s", line)
		}
		h.Optimizer, h.OptimizerBytes, h.NumVelocity = DefaultOptimizer, 4*h.NumVelocity, 0
	}
	switch {
	case h.Optimizer == "" || h.NumVelocity != 0:
		return nil, fmt.Errorf("header names no optimizer: %s", line)
	case h.NumParams <= 0 || h.OptimizerBytes < 0 || h.StateBytes < 0 || h.WorldSize < 1 || h.Round < 0 || h.GlobalRounds < 0 || h.GlobalSamples < 0 || h.Elapsed < 0:
		return nil, fmt.Errorf("header holds an impossible value: %s", line)
	case h.Rank != nil && (*h.Rank < 0 || *h.Rank >= h.WorldSize):
		return nil, fmt.Errorf("header: the part of rank %d in a checkpoint of %d ranks", *h.Rank, h.WorldSize)
	}
	want := int64(len(checkpointMagic)) + int64(len(line)) + 1 + h.payloadLen()
	if size != want {
		return nil, fmt.Errorf("%d bytes, the header announces %d (a truncated or extended file)", size, want)
	}
	payload := make([]byte, h.payloadLen())
	if _, err := io.ReadFull(r, payload); err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	if got := crc32.Checksum(payload, castagnoli); got != h.CRC32C {
		return nil, fmt.Errorf("payload checksum %08x, the header says %08x (a corrupted file)", got, h.CRC32C)
	}
	c.Params = readFloats(payload[:4*h.NumParams])
	payload = payload[4*h.NumParams:]
	c.OptimizerState = payload[:h.OptimizerBytes]
	c.State = payload[h.OptimizerBytes:]
	return &c, nil
}

func appendFloats(b []byte, v []float32) []byte {
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func readFloats(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// Matches checks that c can continue the job cfg describes on size ranks with a model of
// numParams parameters, naming file and the first mismatch. resizable says whether the
// strategy can continue on another number of ranks.
func (c *Checkpoint) Matches(file string, cfg *Config, size, numParams int, resizable bool) error {
	switch {
	case c.Strategy != cfg.Strategy:
		return fmt.Errorf("trainer: checkpoint %s is of Config.Strategy %s, this job runs Config.Strategy %s", file, c.Strategy, cfg.Strategy)
	case len(c.Params) != numParams:
		return fmt.Errorf("trainer: checkpoint %s holds a model of %d parameters, this job's model has %d (another model?)", file, len(c.Params), numParams)
	case c.Seed != cfg.Seed:
		return fmt.Errorf("trainer: checkpoint %s was written with Config.Seed %d, this job has Config.Seed %d", file, c.Seed, cfg.Seed)
	case c.WorldSize != size && !resizable:
		return fmt.Errorf("trainer: checkpoint %s was written by %d ranks and Config.Strategy %s cannot continue on %d", file, c.WorldSize, cfg.Strategy, size)
	case c.Optimizer != cfg.optimizerName():
		return fmt.Errorf("trainer: checkpoint %s holds the state of Config.Optimizer %s, this job runs Config.Optimizer %s", file, c.Optimizer, cfg.optimizerName())
	}
	return nil
}
