package data

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Split is how the training set is divided among ranks (docs/algorithms.md#data-shards).
type Split string

// Splits.
const (
	// SplitIID: shard r is the contiguous range [r·L/N, (r+1)·L/N) of the stored order
	// (L/N rounded down, the remainder dropped), reshuffled within the shard every epoch.
	// Fashion-MNIST's stored order is not class-sorted, so shards are ≈IID.
	SplitIID Split = "iid"
	// SplitByClass: all indices stably sorted by label, then the same contiguous slices,
	// iterated in class-sorted order every epoch with no shuffling (ESync's non-IID).
	SplitByClass Split = "by-class"
	// SplitByClassShuffled: the by-class shards, reshuffled within the shard every epoch.
	SplitByClassShuffled Split = "by-class-shuffled"
)

// Splits returns the known split names.
func Splits() []string {
	return []string{string(SplitIID), string(SplitByClass), string(SplitByClassShuffled)}
}

// ParseSplit maps a flag value to a Split; "by_class" and "non-iid" are accepted aliases.
func ParseSplit(s string) (Split, error) {
	switch strings.ToLower(s) {
	case "iid":
		return SplitIID, nil
	case "by-class", "by_class", "non-iid", "noniid":
		return SplitByClass, nil
	case "by-class-shuffled", "by_class_shuffled":
		return SplitByClassShuffled, nil
	}
	return "", fmt.Errorf("data: unknown split %q (known: %s)", s, strings.Join(Splits(), ", "))
}

// ShardConfig selects one rank's shard.
type ShardConfig struct {
	Split Split
	Rank  int
	Size  int    // number of ranks
	Seed  uint64 // shuffling seed, shared by all ranks
}

// Validate reports a bad rank, size or split.
func (c ShardConfig) Validate() error {
	if c.Size < 1 {
		return fmt.Errorf("data: shard: world size %d < 1", c.Size)
	}
	if c.Rank < 0 || c.Rank >= c.Size {
		return fmt.Errorf("data: shard: rank %d out of range 0..%d", c.Rank, c.Size-1)
	}
	if _, err := ParseSplit(string(c.Split)); err != nil {
		return err
	}
	return nil
}

// Shard is one rank's part of a Dataset: a list of sample indices into it.
type Shard struct {
	ds      *Dataset
	cfg     ShardConfig
	indices []int // in base (epoch-independent) order
}

// NewShard cuts rank cfg.Rank's shard out of ds. A shard that would be empty (more ranks than
// samples) is an error.
func NewShard(ds *Dataset, cfg ShardConfig) (*Shard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := ds.Validate(); err != nil {
		return nil, err
	}
	split, _ := ParseSplit(string(cfg.Split))
	cfg.Split = split
	per := ds.N / cfg.Size
	if per == 0 {
		return nil, fmt.Errorf("data: shard: rank %d: %d samples cannot be split over %d ranks", cfg.Rank, ds.N, cfg.Size)
	}
	order := make([]int, ds.N)
	if split == SplitIID {
		for i := range order {
			order[i] = i
		}
	} else {
		order = sortedByLabel(ds.Labels)
	}
	lo := cfg.Rank * per
	idx := make([]int, per)
	copy(idx, order[lo:lo+per])
	return &Shard{ds: ds, cfg: cfg, indices: idx}, nil
}

// sortedByLabel is a stable counting sort of the indices by label.
func sortedByLabel(labels []uint8) []int {
	var start [NumClasses + 1]int
	for _, l := range labels {
		start[int(l)+1]++
	}
	for c := 1; c <= NumClasses; c++ {
		start[c] += start[c-1]
	}
	out := make([]int, len(labels))
	for i, l := range labels {
		out[start[l]] = i
		start[l]++
	}
	return out
}

// Len is the number of samples in the shard.
func (s *Shard) Len() int { return len(s.indices) }

// Indices returns a copy of the shard's sample indices in their base order (before any
// per-epoch shuffle).
func (s *Shard) Indices() []int { return append([]int(nil), s.indices...) }

// Config returns the configuration the shard was cut with.
func (s *Shard) Config() ShardConfig { return s.cfg }

// shuffles reports whether the split reshuffles every epoch.
func (s *Shard) shuffles() bool { return s.cfg.Split != SplitByClass }

// EpochOrder writes into dst (len Len()) the sample order of the given epoch. It depends only on
// (seed, rank, epoch), so any epoch can be reproduced without replaying earlier ones.
func (s *Shard) EpochOrder(epoch int, dst []int) {
	copy(dst, s.indices)
	if !s.shuffles() {
		return
	}
	rng := rand.New(rand.NewPCG(s.cfg.Seed, uint64(s.cfg.Rank)<<32|uint64(uint32(epoch))))
	rng.Shuffle(len(dst), func(i, j int) { dst[i], dst[j] = dst[j], dst[i] })
}

// Batch is one mini-batch. Its slices belong to the iterator and are overwritten by the next
// call to Next.
type Batch struct {
	Images  []float32 // Size×ImageSize
	Labels  []uint8   // Size
	Indices []int     // dataset indices of the samples
	Size    int       // ≤ the batch size: the last batch of an epoch may be partial
	Epoch   int       // 0-based epoch this batch belongs to
	Step    int       // 0-based batch index within the epoch
	Last    bool      // the last batch of its epoch
}

// BatchIterator walks a shard in mini-batches, epoch after epoch, forever. It keeps the last
// partial batch of each epoch (like a PyTorch/MXNet DataLoader without drop_last). It
// allocates nothing after construction.
type BatchIterator struct {
	shard     *Shard
	batchSize int
	order     []int
	epoch     int
	pos       int
	step      int
	images    []float32
	labels    []uint8
}

// Batches returns an iterator starting at epoch 0.
func (s *Shard) Batches(batchSize int) (*BatchIterator, error) {
	if batchSize < 1 {
		return nil, fmt.Errorf("data: rank %d: batch size %d < 1", s.cfg.Rank, batchSize)
	}
	it := &BatchIterator{
		shard:     s,
		batchSize: batchSize,
		order:     make([]int, len(s.indices)),
		images:    make([]float32, batchSize*ImageSize),
		labels:    make([]uint8, batchSize),
	}
	it.SeekEpoch(0)
	return it, nil
}

// SeekEpoch restarts the iterator at the first batch of the given epoch.
func (it *BatchIterator) SeekEpoch(epoch int) {
	it.epoch, it.pos, it.step = epoch, 0, 0
	it.shard.EpochOrder(epoch, it.order)
}

// Epoch is the epoch of the batch that the next call to Next returns.
func (it *BatchIterator) Epoch() int { return it.epoch }

// BatchesPerEpoch is ⌈shard length / batch size⌉.
func (it *BatchIterator) BatchesPerEpoch() int {
	return (len(it.order) + it.batchSize - 1) / it.batchSize
}

// Next fills b with the next mini-batch, moving to the next (reshuffled) epoch after the last
// batch of the current one.
func (it *BatchIterator) Next(b *Batch) {
	if it.pos >= len(it.order) {
		it.SeekEpoch(it.epoch + 1)
	}
	n := min(it.batchSize, len(it.order)-it.pos)
	ds := it.shard.ds
	idx := it.order[it.pos : it.pos+n]
	for k, i := range idx {
		copy(it.images[k*ImageSize:(k+1)*ImageSize], ds.Images[i*ImageSize:(i+1)*ImageSize])
		it.labels[k] = ds.Labels[i]
	}
	*b = Batch{
		Images:  it.images[:n*ImageSize],
		Labels:  it.labels[:n],
		Indices: idx,
		Size:    n,
		Epoch:   it.epoch,
		Step:    it.step,
		Last:    it.pos+n == len(it.order),
	}
	it.pos += n
	it.step++
}
