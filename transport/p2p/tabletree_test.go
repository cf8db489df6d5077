package p2p

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport"
)

// TestTableTreeShape: every rank but 0 has a parent below it, rank 0 has tableFanout children,
// and no rank more; the depth grows with log p.
func TestTableTreeShape(t *testing.T) {
	for _, p := range []int{2, 9, 10, 73, 74, 1024, 10000} {
		children := make([]int, p)
		depth := make([]int, p)
		deepest := 0
		for r := 1; r < p; r++ {
			pa := tableParent(r)
			if pa < 0 || pa >= r {
				t.Fatalf("p=%d: rank %d has parent %d", p, r, pa)
			}
			children[pa]++
			depth[r] = depth[pa] + 1
			deepest = max(deepest, depth[r])
		}
		for r, c := range children {
			if c > tableFanout {
				t.Fatalf("p=%d: rank %d passes the table to %d ranks", p, r, c)
			}
		}
		want := 0
		for n, level := 1, 1; n < p; level *= tableFanout {
			n += level * tableFanout
			want++
		}
		if deepest != want {
			t.Errorf("p=%d: the table is %d hops deep, want %d", p, deepest, want)
		}
	}
}

// TestPeerTableDownTheTree joins a job of tableFanout+3 ranks over real libp2p hosts: rank 0
// sends the table itself to its tableFanout children only, the last two ranks fetch it from
// rank 1, and every rank ends with the whole table (each pair exchanges messages).
func TestPeerTableDownTheTree(t *testing.T) {
	size := tableFanout + 3
	var mu sync.Mutex
	full := map[int]bool{}
	hk := hooks{answered: func(r int, f bool) {
		mu.Lock()
		full[r] = f
		mu.Unlock()
	}}
	base := Config{Size: size, Secret: "table tree", Security: SecurityNone, DataPath: DataPathTCP,
		JoinTimeout: 60 * time.Second, Logger: quiet}
	eps := startJobWith(t, base, nil, hk)
	mu.Lock()
	for r := 1; r < size; r++ {
		if want := r <= tableFanout; full[r] != want {
			t.Errorf("rank 0 sent rank %d the table itself: %v, want %v", r, full[r], want)
		}
	}
	mu.Unlock()
	exchangeAll(t, eps)
}

// TestJoinProgressIsLogged: while ranks are missing, rank 0 logs how many joined and which
// are missing; the late rank then joins.
func TestJoinProgressIsLogged(t *testing.T) {
	logged := make(chan string, 16)
	h := &chanHandler{lines: logged}
	base := Config{Size: 3, Secret: "join progress", Security: SecurityNone, DataPath: DataPathTCP,
		JoinTimeout: 60 * time.Second, Logger: quiet}
	cfg0 := base
	cfg0.Logger = slog.New(h)
	addr, res0 := startRank0With(t, cfg0, hooks{progressInterval: 20 * time.Millisecond})
	res1 := startRank(base, 1, addr)
	want := "2 of 3 ranks joined; waiting for rank(s) 2"
	for line := range logged {
		if strings.Contains(line, want) {
			break
		}
	}
	res2 := startRank(base, 2, addr)
	eps := make([]transport.Endpoint, 3)
	t.Cleanup(func() { closeAll(eps) })
	for r, c := range []<-chan result{res0, res1, res2} {
		res := <-c
		if res.err != nil {
			t.Fatalf("rank %d: %v", r, res.err)
		}
		eps[r] = res.ep
	}
}

// chanHandler is a slog handler that passes each record's message to a channel (dropping
// records when the test stopped reading).
type chanHandler struct{ lines chan string }

func (h *chanHandler) Enabled(_ context.Context, _ slog.Level) bool { return true }
func (h *chanHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.lines <- fmt.Sprint(r.Message):
	default:
	}
	return nil
}
func (h *chanHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *chanHandler) WithGroup(string) slog.Handler      { return h }
