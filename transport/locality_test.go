package transport

import "testing"

// TestSameHost: the in-process job is one host; an endpoint that cannot tell shares a host with
// no other rank.
func TestSameHost(t *testing.T) {
	type opaque struct{ Endpoint } // hides the optional interface
	for size := 1; size <= 9; size++ {
		eps := NewMemJob(size)
		for r, ep := range eps {
			mem, hidden := SameHost(ep), SameHost(opaque{ep})
			if delayed := SameHost(NewDelayed(ep, 0, nil, nil)); len(delayed) != size || !delayed[(r+1)%size] {
				t.Errorf("np%d rank %d: a delayed endpoint hides its hosts: %v", size, r, delayed)
			}
			if len(mem) != size || len(hidden) != size {
				t.Fatalf("np%d rank %d: rows of %d and %d ranks", size, r, len(mem), len(hidden))
			}
			for q := range size {
				if !mem[q] {
					t.Errorf("np%d: mem rank %d does not share a host with rank %d", size, r, q)
				}
				if hidden[q] != (q == r) {
					t.Errorf("np%d: opaque rank %d: SameHost[%d] = %v", size, r, q, hidden[q])
				}
			}
		}
	}
}
