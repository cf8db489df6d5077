//go:build linux

package shm

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"
	"time"
)

// TestLendNotOverwritten streams a pattern through the smallest ring while the reader takes it
// in lends of varied sizes (some wrapping the ring's end, some held two at a time and given
// back out of order) and in reads of odd sizes between them. The writer keeps writing while a
// lend is held: every lent slice must still hold its bytes when it is given back.
func TestLendNotOverwritten(t *testing.T) {
	a, b := newPair(t, Options{RingSize: MinRingSize, SingleCopyMin: -1})
	if b.LendMax() != MinRingSize/2 {
		t.Fatalf("LendMax = %d, want %d (no mirrored mapping?)", b.LendMax(), MinRingSize/2)
	}
	const total = 4 << 20
	want := pattern(0, total)
	werr := make(chan error, 1)
	go func() {
		for off := 0; off < total; {
			k := min(total-off, 1+(off*7919)%(40<<10))
			if _, err := a.Write(want[off : off+k]); err != nil {
				werr <- err
				return
			}
			off += k
		}
		werr <- nil
	}()
	// Hold each lend while the writer fills the rest of the ring, then check it again.
	hold := func() {
		for range 50 {
			runtime.Gosched()
		}
	}
	sizes := []int{8, 4096, 24 << 10, 32 << 10, 1000, 16, 12 << 10, 17 << 10}
	pos, lends := 0, 0
	for i := 0; pos < total; i++ {
		n := min(sizes[i%len(sizes)], total-pos)
		if i%5 == 4 {
			// A read between lends.
			buf := make([]byte, n)
			if _, err := io.ReadFull(b, buf); err != nil {
				t.Fatalf("read at %d: %v", pos, err)
			}
			if !bytes.Equal(buf, want[pos:pos+n]) {
				t.Fatalf("read at %d: wrong bytes", pos)
			}
			pos += n
			continue
		}
		l1, err := b.Lend(n)
		if err != nil {
			t.Fatalf("lend of %d at %d: %v", n, pos, err)
		}
		if l1 == nil {
			t.Fatalf("lend of %d at %d refused with nothing held", n, pos)
		}
		p1 := pos
		pos += n
		lends++
		// A second lend while the first is held, when both fit in half the ring.
		var l2 []byte
		p2 := pos
		if m := min(4096, total-pos); m > 0 && n+m <= b.LendMax() && i%2 == 0 {
			if l2, err = b.Lend(m); err != nil {
				t.Fatalf("second lend at %d: %v", pos, err)
			}
			if l2 == nil {
				t.Fatalf("second lend of %d at %d refused with %d held", m, pos, b.Held())
			}
			pos += m
		} else if m > 0 && n+m > b.LendMax() {
			if l, _ := b.Lend(m); l != nil {
				t.Fatalf("lend of %d at %d granted with %d held (limit %d)", m, pos, b.Held(), b.LendMax())
			}
		}
		hold()
		if !bytes.Equal(l1, want[p1:p1+n]) {
			t.Fatalf("lend at %d (%d bytes) overwritten while held", p1, n)
		}
		if l2 != nil {
			if !bytes.Equal(l2, want[p2:p2+len(l2)]) {
				t.Fatalf("second lend at %d overwritten while held", p2)
			}
			b.Return(l2) // out of order: the first still holds the ring
			hold()
			if !bytes.Equal(l1, want[p1:p1+n]) {
				t.Fatalf("lend at %d overwritten after a later one was given back", p1)
			}
		}
		b.Return(l1)
		if b.Held() != 0 {
			t.Fatalf("%d bytes held after every lend was given back", b.Held())
		}
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if lends < 50 {
		t.Fatalf("only %d lends", lends)
	}
}

// TestLendRefusals: what Lend declines takes nothing, and the stream goes on with Read.
func TestLendRefusals(t *testing.T) {
	a, b := newPair(t, Options{RingSize: MinRingSize, SingleCopyMin: -1})
	data := pattern(0, 3*8+MinRingSize/2+8)
	go a.Write(data)
	for _, n := range []int{0, -1, MinRingSize/2 + 8} {
		if l, err := b.Lend(n); l != nil || err != nil {
			t.Fatalf("Lend(%d) = %d bytes, %v; want nothing", n, len(l), err)
		}
	}
	var one [1]byte
	if _, err := io.ReadFull(b, one[:]); err != nil {
		t.Fatal(err)
	}
	var seven [7]byte
	if _, err := io.ReadFull(b, seven[:]); err != nil {
		t.Fatal(err)
	}
	l, err := b.Lend(16)
	if err != nil || !bytes.Equal(l, data[8:24]) {
		t.Fatalf("Lend(16) = %v, %v; want the stream's bytes 8-24", l, err)
	}
	if l2, err := b.Lend(MinRingSize / 2); l2 != nil || err != nil {
		t.Fatalf("Lend past half the ring with 16 bytes held = %d bytes, %v; want nothing", len(l2), err)
	}
	b.Return(l)
	b.Return(l) // twice: nothing
	rest := make([]byte, len(data)-24)
	if _, err := io.ReadFull(b, rest); err != nil || !bytes.Equal(rest, data[24:]) {
		t.Fatalf("reading after the refusals: %v", err)
	}
}

// TestLendEnds: a lend waiting for bytes that never come fails as Read would, and bytes lent
// before the peer closed, died or this end closed stay readable until given back.
func TestLendEnds(t *testing.T) {
	cases := []struct {
		name string
		end  func(a, b *Pipe)
		want func(error) bool
	}{
		{"peer closes", func(a, b *Pipe) { a.Close() }, func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) }},
		{"peer gone", func(a, b *Pipe) { a.link.Close() }, func(err error) bool { return errors.Is(err, ErrPeerGone) }},
		{"deadline", func(a, b *Pipe) { b.SetReadDeadline(time.Now().Add(20 * time.Millisecond)) }, isTimeout},
		{"this end closes", func(a, b *Pipe) { go func() { time.Sleep(20 * time.Millisecond); b.Close() }() }, func(err error) bool { return err != nil }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := newPair(t, Options{RingSize: MinRingSize, SingleCopyMin: -1})
			data := pattern(0, 4096+100)
			if _, err := a.Write(data); err != nil {
				t.Fatal(err)
			}
			held, err := b.Lend(4096)
			if err != nil || held == nil {
				t.Fatalf("lend: %v", err)
			}
			c.end(a, b)
			done := make(chan error, 1)
			go func() {
				_, err := b.Lend(1024) // 100 bytes are there, never 1024
				done <- err
			}()
			select {
			case err := <-done:
				if !c.want(err) {
					t.Fatalf("Lend ended with %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Lend did not return")
			}
			b.Close()
			if !bytes.Equal(held, data[:4096]) {
				t.Fatal("lent bytes changed")
			}
			b.Return(held) // unmaps the closed pipe's segment
		})
	}
}
