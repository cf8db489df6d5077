package collective

import "fmt"

// checkSchedules builds the schedules of every rank for one call and verifies them: every send
// has a matching receive of the same size and tag, nothing deadlocks, no contribution is
// reduced twice, and at the end every rank holds what the collective promises. p is at most
// 63 (a contribution is a bit of a word).
func checkSchedules(alg algorithm, kind collKind, p, n, root, segBytes int) error {
	const elemSize = 4
	scheds := buildAll(alg, kind, p, n, root, elemSize, segBytes)
	full := uint64(1)<<p - 1
	masks := make([][]uint64, p)
	for r := range masks {
		masks[r] = make([]uint64, n)
		lo, hi := Partition(n, p, r)
		for e := range masks[r] {
			switch kind {
			case kindAllReduce, kindReduceScatter, kindReduce:
				masks[r][e] = 1 << r
			case kindAllGather:
				if e >= lo && e < hi {
					masks[r][e] = full
				}
			case kindBroadcast:
				if r == root {
					masks[r][e] = full
				}
			}
		}
	}
	if _, err := replay(scheds, elemSize, uniformModel(1e-6, 1e-9), masks); err != nil {
		return err
	}
	for r := range masks {
		lo, hi := 0, n
		switch kind {
		case kindReduceScatter:
			lo, hi = Partition(n, p, r)
		case kindReduce:
			if r != root {
				continue
			}
		case kindBarrier, kindAllToAll:
			continue
		}
		for e := lo; e < hi; e++ {
			if masks[r][e] != full {
				return fmt.Errorf("rank %d element %d holds contributions %#x, want %#x", r, e, masks[r][e], full)
			}
		}
	}
	return nil
}

// checkAlgorithm holds an algorithm registered from outside to what Algorithm promises,
// before any job runs it: its allreduce, reduce-scatter and allgather for 1 to
// checkRanks ranks over lengths that leave blocks empty, uneven and cut into several
// segments.
func checkAlgorithm(alg algorithm) error {
	const segBytes = 3 * 4 // three float32 elements: most ranges take several segments
	for p := 1; p <= checkRanks; p++ {
		for _, n := range []int{0, 1, p - 1, p + 2, 4*p + 3} {
			for _, kind := range []collKind{kindAllReduce, kindReduceScatter, kindAllGather} {
				if err := checkSchedules(alg, kind, p, n, 0, segBytes); err != nil {
					return fmt.Errorf("%v of %d elements over %d ranks: %w", kind, n, p, err)
				}
			}
		}
	}
	return nil
}

// checkRanks is the largest job checkAlgorithm checks: powers of two and not, up to the job
// sizes of the package's tests.
const checkRanks = 9
