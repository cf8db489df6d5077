package data

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// synthetic returns a dataset of n samples whose labels cycle with a stride (not sorted) and
// whose first pixel encodes the sample index, so batches can be checked against indices.
func synthetic(n int) *Dataset {
	ds := &Dataset{Images: make([]float32, n*ImageSize), Labels: make([]uint8, n), N: n}
	for i := 0; i < n; i++ {
		ds.Labels[i] = uint8((i*7 + i/3) % NumClasses)
		ds.Images[i*ImageSize] = float32(i)
		ds.Images[i*ImageSize+ImageSize-1] = float32(-i)
	}
	return ds
}

func TestShardSemantics(t *testing.T) {
	const n = 103 // prime: every world size except 1 and 103 leaves a remainder
	ds := synthetic(n)
	byLabel := sortedByLabel(ds.Labels)
	for _, split := range []Split{SplitIID, SplitByClass, SplitByClassShuffled} {
		for size := 1; size <= 9; size++ {
			t.Run(fmt.Sprintf("%s/p=%d", split, size), func(t *testing.T) {
				per := n / size
				seen := make([]bool, n)
				var all []int
				for rank := 0; rank < size; rank++ {
					s, err := NewShard(ds, ShardConfig{Split: split, Rank: rank, Size: size, Seed: 42})
					if err != nil {
						t.Fatal(err)
					}
					if s.Len() != per {
						t.Fatalf("rank %d: %d samples, want %d", rank, s.Len(), per)
					}
					idx := s.Indices()
					for _, i := range idx {
						if seen[i] {
							t.Fatalf("rank %d: sample %d is in two shards", rank, i)
						}
						seen[i] = true
					}
					all = append(all, idx...)
					switch split {
					case SplitIID:
						for k, i := range idx { // contiguous range of the stored order
							if i != rank*per+k {
								t.Fatalf("rank %d: index %d is %d, want %d", rank, k, i, rank*per+k)
							}
						}
					default:
						if !slices.Equal(idx, byLabel[rank*per:(rank+1)*per]) {
							t.Fatalf("rank %d: shard is not slice %d of the label-sorted order", rank, rank)
						}
					}
				}
				// Coverage: the shards together are exactly the first size·per samples of the
				// base order; the remainder n mod size is dropped.
				base := make([]int, n)
				for i := range base {
					base[i] = i
				}
				if split != SplitIID {
					base = byLabel
				}
				if !slices.Equal(all, base[:size*per]) {
					t.Fatalf("shards do not cover the first %d samples of the base order", size*per)
				}
			})
		}
	}
}

func TestSortedByLabelStable(t *testing.T) {
	ds := synthetic(200)
	order := sortedByLabel(ds.Labels)
	for k := 1; k < len(order); k++ {
		a, b := order[k-1], order[k]
		if ds.Labels[a] > ds.Labels[b] || (ds.Labels[a] == ds.Labels[b] && a > b) {
			t.Fatalf("positions %d,%d: (label %d, idx %d) before (label %d, idx %d)", k-1, k, ds.Labels[a], a, ds.Labels[b], b)
		}
	}
}

// The by-class example of docs/algorithms.md#data-shards on a balanced set: with N=6 and 10 classes of
// 6 000, rank 0 gets all of class 0 plus 4 000 of class 1, rank 1 gets 2 000 of class 1,
// class 2 and 2 000 of class 3; with N=2 it is classes 0–4 against 5–9.
func TestShardByClassExample(t *testing.T) {
	const perClass = 60 // scaled down 100× from 6 000
	ds := &Dataset{N: perClass * NumClasses, Images: make([]float32, perClass*NumClasses*ImageSize), Labels: make([]uint8, perClass*NumClasses)}
	for i := range ds.Labels {
		ds.Labels[i] = uint8((i * 3) % NumClasses) // interleaved, like the real file
	}
	counts := func(size, rank int) [NumClasses]int {
		s, err := NewShard(ds, ShardConfig{Split: SplitByClass, Rank: rank, Size: size})
		if err != nil {
			t.Fatal(err)
		}
		var c [NumClasses]int
		for _, i := range s.Indices() {
			c[ds.Labels[i]]++
		}
		return c
	}
	cases := []struct {
		size, rank int
		want       [NumClasses]int
	}{
		{6, 0, [NumClasses]int{60, 40}},
		{6, 1, [NumClasses]int{0, 20, 60, 20}},
		{6, 5, [NumClasses]int{8: 40, 9: 60}},
		{2, 0, [NumClasses]int{60, 60, 60, 60, 60}},
		{2, 1, [NumClasses]int{5: 60, 6: 60, 7: 60, 8: 60, 9: 60}},
	}
	for _, tc := range cases {
		if got := counts(tc.size, tc.rank); got != tc.want {
			t.Errorf("p=%d rank %d: class counts %v, want %v", tc.size, tc.rank, got, tc.want)
		}
	}
}

func TestShardConfigErrors(t *testing.T) {
	ds := synthetic(5)
	cases := []struct {
		cfg  ShardConfig
		want string
	}{
		{ShardConfig{Split: SplitIID, Rank: 0, Size: 0}, "world size 0"},
		{ShardConfig{Split: SplitIID, Rank: 3, Size: 3}, "rank 3 out of range 0..2"},
		{ShardConfig{Split: SplitIID, Rank: -1, Size: 3}, "rank -1"},
		{ShardConfig{Split: "random", Rank: 0, Size: 1}, "unknown split \"random\" (known: iid, by-class, by-class-shuffled)"},
		{ShardConfig{Split: SplitIID, Rank: 0, Size: 6}, "5 samples cannot be split over 6 ranks"},
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			_, err := NewShard(ds, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := NewShard(&Dataset{N: 2, Labels: []uint8{1}}, ShardConfig{Split: SplitIID, Size: 1}); err == nil {
		t.Fatal("inconsistent dataset accepted")
	}
	s, _ := NewShard(ds, ShardConfig{Split: SplitIID, Size: 1})
	if _, err := s.Batches(0); err == nil || !strings.Contains(err.Error(), "batch size 0") {
		t.Fatalf("Batches(0) = %v", err)
	}
}

func TestParseSplit(t *testing.T) {
	for in, want := range map[string]Split{"iid": SplitIID, "IID": SplitIID, "by-class": SplitByClass, "by_class": SplitByClass,
		"non-iid": SplitByClass, "by-class-shuffled": SplitByClassShuffled} {
		if got, err := ParseSplit(in); err != nil || got != want {
			t.Errorf("ParseSplit(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// collectEpochs runs the iterator over k epochs and returns the sample order of each.
func collectEpochs(t *testing.T, it *BatchIterator, k int) [][]int {
	t.Helper()
	var out [][]int
	var b Batch
	for e := 0; e < k; e++ {
		var order []int
		for {
			it.Next(&b)
			if b.Epoch != e {
				t.Fatalf("batch of epoch %d while collecting epoch %d", b.Epoch, e)
			}
			for k, i := range b.Indices {
				if got := b.Images[k*ImageSize]; got != float32(i) {
					t.Fatalf("batch sample %d holds image of sample %v, want %d", k, got, i)
				}
				if got := b.Images[k*ImageSize+ImageSize-1]; got != float32(-i) {
					t.Fatalf("batch sample %d: last pixel %v, want %d", k, got, -i)
				}
				if b.Labels[k] != it.shard.ds.Labels[i] {
					t.Fatalf("batch sample %d: label %d, want %d", k, b.Labels[k], it.shard.ds.Labels[i])
				}
			}
			order = append(order, b.Indices...)
			if b.Last {
				break
			}
		}
		out = append(out, order)
	}
	return out
}

func TestBatchIterator(t *testing.T) {
	ds := synthetic(103)
	cases := []struct {
		split     Split
		size      int
		batch     int
		shuffles  bool
		wantSizes []int // batch sizes of one epoch
	}{
		{SplitIID, 4, 8, true, []int{8, 8, 8, 1}},      // 25 samples
		{SplitIID, 1, 103, true, []int{103}},           // one full batch
		{SplitIID, 3, 50, true, []int{34}},             // one partial batch
		{SplitByClass, 4, 10, false, []int{10, 10, 5}}, // no shuffling
		{SplitByClassShuffled, 2, 20, true, []int{20, 20, 11}},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/p=%d/b=%d", tc.split, tc.size, tc.batch), func(t *testing.T) {
			for rank := 0; rank < tc.size; rank++ {
				newIt := func(seed uint64) *BatchIterator {
					s, err := NewShard(ds, ShardConfig{Split: tc.split, Rank: rank, Size: tc.size, Seed: seed})
					if err != nil {
						t.Fatal(err)
					}
					it, err := s.Batches(tc.batch)
					if err != nil {
						t.Fatal(err)
					}
					return it
				}
				it := newIt(7)
				if it.BatchesPerEpoch() != len(tc.wantSizes) {
					t.Fatalf("BatchesPerEpoch = %d, want %d", it.BatchesPerEpoch(), len(tc.wantSizes))
				}
				var b Batch
				for step, want := range tc.wantSizes {
					it.Next(&b)
					if b.Size != want || len(b.Labels) != want || len(b.Images) != want*ImageSize || b.Step != step {
						t.Fatalf("step %d: size %d (labels %d, pixels %d), step %d; want size %d", step, b.Size, len(b.Labels), len(b.Images), b.Step, want)
					}
					if b.Last != (step == len(tc.wantSizes)-1) {
						t.Fatalf("step %d: Last = %v", step, b.Last)
					}
				}
				epochs := collectEpochs(t, newIt(7), 3)
				base := newIt(7).shard.Indices()
				for e, order := range epochs {
					if !sameSet(order, base) {
						t.Fatalf("epoch %d is not a permutation of the shard", e)
					}
				}
				if !tc.shuffles {
					for e, order := range epochs {
						if !slices.Equal(order, base) {
							t.Fatalf("epoch %d of an unshuffled split is not in base order", e)
						}
					}
				} else if len(base) > 3 && (slices.Equal(epochs[0], epochs[1]) || slices.Equal(epochs[1], epochs[2])) {
					t.Fatalf("shuffled split repeats the same order in consecutive epochs")
				}
				// Determinism: same seed, same sequence; SeekEpoch reproduces a later epoch.
				if again := collectEpochs(t, newIt(7), 3); !slices.Equal(slices.Concat(again...), slices.Concat(epochs...)) {
					t.Fatalf("same seed gave a different sequence")
				}
				seek := newIt(7)
				seek.SeekEpoch(2)
				var b2 Batch
				seek.Next(&b2)
				if b2.Epoch != 2 || !slices.Equal(b2.Indices, epochs[2][:b2.Size]) {
					t.Fatalf("SeekEpoch(2) does not reproduce epoch 2")
				}
				if tc.shuffles && len(base) > 3 {
					other := collectEpochs(t, newIt(8), 1)
					if slices.Equal(other[0], epochs[0]) {
						t.Fatalf("a different seed gave the same order")
					}
				}
			}
		})
	}
}

func sameSet(a, b []int) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func TestBatchIteratorAllocs(t *testing.T) {
	s, err := NewShard(synthetic(103), ShardConfig{Split: SplitIID, Size: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	it, err := s.Batches(8)
	if err != nil {
		t.Fatal(err)
	}
	var b Batch
	if allocs := testing.AllocsPerRun(200, func() { it.Next(&b) }); allocs != 0 {
		t.Fatalf("Next allocates %.1f times per batch (across epoch boundaries too), want 0", allocs)
	}
}

// TestRealFashionMNIST reads the real data set. It is skipped only when the data is absent
// and HETSYNC_REQUIRE_DATA is unset; with HETSYNC_REQUIRE_DATA=1 a missing data set fails.
func TestRealFashionMNIST(t *testing.T) {
	loc := NewLocator("")
	loc.Download = false
	dir, err := loc.Locate(context.Background())
	if err != nil {
		if os.Getenv("HETSYNC_REQUIRE_DATA") == "" {
			t.Skipf("Fashion-MNIST not available (set HETSYNC_REQUIRE_DATA=1 to make this a failure): %v", err)
		}
		t.Fatal(err)
	}
	train, test, err := LoadFashionMNIST(dir)
	if err != nil {
		t.Fatal(err)
	}
	if train.N != FashionTrainN || test.N != FashionTestN {
		t.Fatalf("%s: %d train and %d test samples, want %d and %d", dir, train.N, test.N, FashionTrainN, FashionTestN)
	}
	for _, c := range []struct {
		ds   *Dataset
		want int
	}{{train, FashionTrainN / NumClasses}, {test, FashionTestN / NumClasses}} {
		var counts [NumClasses]int
		for _, l := range c.ds.Labels {
			counts[l]++
		}
		for cls, n := range counts {
			if n != c.want {
				t.Fatalf("class %d has %d samples, want %d", cls, n, c.want)
			}
		}
	}
	// The by-class example of docs/algorithms.md on the real set: p=6, rank 0 = all of class 0 + 4 000 of class 1.
	s, err := NewShard(train, ShardConfig{Split: SplitByClass, Rank: 0, Size: 6})
	if err != nil {
		t.Fatal(err)
	}
	var counts [NumClasses]int
	for _, i := range s.Indices() {
		counts[train.Labels[i]]++
	}
	if counts != [NumClasses]int{6000, 4000} {
		t.Fatalf("by-class rank 0 of 6 has class counts %v", counts)
	}
	// Pixels are in [0, 1] and not all zero.
	var sum float64
	for _, p := range train.Images[:1000*ImageSize] {
		if p < 0 || p > 1 {
			t.Fatalf("pixel %v outside [0, 1]", p)
		}
		sum += float64(p)
	}
	if sum == 0 {
		t.Fatal("first 1000 images are blank")
	}
}

func BenchmarkBatchNext64(b *testing.B) {
	s, err := NewShard(synthetic(6000), ShardConfig{Split: SplitIID, Size: 4, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	it, err := s.Batches(64)
	if err != nil {
		b.Fatal(err)
	}
	var batch Batch
	b.ReportAllocs()
	b.SetBytes(64 * ImageSize * 4)
	for b.Loop() {
		it.Next(&batch)
	}
}

func BenchmarkLoadFashionMNIST(b *testing.B) {
	loc := NewLocator("")
	loc.Download = false
	dir, err := loc.Find()
	if err != nil {
		if os.Getenv("HETSYNC_REQUIRE_DATA") == "" {
			b.Skipf("Fashion-MNIST not available (set HETSYNC_REQUIRE_DATA=1 to make this a failure): %v", err)
		}
		b.Fatal(err)
	}
	for b.Loop() {
		if _, _, err := LoadFashionMNIST(dir); err != nil {
			b.Fatal(err)
		}
	}
}
