package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync/service"
	"github.com/hetsync/hetsync/transport"
)

// startAll starts the store on every rank of an in-memory job of n ranks, held by holder.
func startAll(t *testing.T, n, holder int) []*Store {
	t.Helper()
	eps := transport.NewMemJob(n)
	stores := make([]*Store, n)
	for r, ep := range eps {
		s, err := Start(context.Background(), ep, Config{Holder: holder, MaxBytes: 4096})
		if err != nil {
			t.Fatal(err)
		}
		stores[r] = s
	}
	t.Cleanup(func() {
		for _, s := range stores {
			s.Abort()
		}
		for _, ep := range eps {
			_ = ep.Close()
		}
	})
	return stores
}

// eachRank runs f on every rank at once and reports every rank's error.
func eachRank(t *testing.T, n int, f func(r int) error) {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(r)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// closeAll closes every rank's store at once, as ranks leaving a job do.
func closeAll(t *testing.T, stores []*Store) {
	t.Helper()
	eachRank(t, len(stores), func(r int) error { return stores[r].Close(context.Background()) })
}

// Every operation, from every rank (the holder's own calls included), on jobs of 1 to 5 ranks
// held by the first and the last rank.
func TestStoreOperationsAcrossRanks(t *testing.T) {
	ctx := context.Background()
	for n := 1; n <= 5; n++ {
		for _, holder := range []int{0, n - 1} {
			t.Run(fmt.Sprintf("%d ranks held by %d", n, holder), func(t *testing.T) {
				stores := startAll(t, n, holder)
				all := make([]string, n)
				for r := range n {
					all[r] = fmt.Sprintf("rank%d", r)
				}
				eachRank(t, n, func(r int) error {
					s := stores[r]
					if err := s.Set(ctx, all[r], []byte(fmt.Sprintf("value of %d", r))); err != nil {
						return err
					}
					if _, err := s.Add(ctx, "count", int64(r+1)); err != nil {
						return err
					}
					// Every rank's key, waited for: the others' sets may come later.
					if err := s.Wait(ctx, all, 10*time.Second); err != nil {
						return err
					}
					for o := range n {
						v, err := s.Get(ctx, all[o], 10*time.Second)
						if err != nil {
							return err
						}
						if want := fmt.Sprintf("value of %d", o); string(v) != want {
							return fmt.Errorf("get %s = %q, want %q", all[o], v, want)
						}
					}
					if ok, err := s.Check(ctx, append([]string{"absent"}, all...)); err != nil || ok {
						return fmt.Errorf("check with an absent key = %t, %v; want false", ok, err)
					}
					if ok, err := s.Check(ctx, all); err != nil || !ok {
						return fmt.Errorf("check of every rank's key = %t, %v; want true", ok, err)
					}
					// compare_set: only one rank's swap from empty succeeds.
					got, err := s.CompareSet(ctx, "winner", nil, []byte(all[r]))
					if err != nil {
						return err
					}
					if !strings.HasPrefix(string(got), "rank") {
						return fmt.Errorf("compare_set of winner = %q", got)
					}
					return nil
				})
				s := stores[n-1-holder] // a client where there is one
				want := int64(n * (n + 1) / 2)
				if v, err := s.Add(ctx, "count", 0); err != nil || v != want {
					t.Fatalf("count = %d, %v; want %d", v, err, want)
				}
				if v, err := s.Get(ctx, "count", time.Second); err != nil || string(v) != fmt.Sprint(want) {
					t.Fatalf("get count = %q, %v; want the counter as text", v, err)
				}
				winner, _ := s.Get(ctx, "winner", time.Second)
				for _, c := range []struct {
					key, expected, desired, want string
				}{
					{"winner", "nobody", "me", string(winner)}, // not the expected value: unchanged
					{"winner", string(winner), "me", "me"},     // the expected value: swapped
					{"absent", "x", "y", "x"},                  // absent, expecting a value: the expected one, not set
				} {
					if got, err := s.CompareSet(ctx, c.key, []byte(c.expected), []byte(c.desired)); err != nil || string(got) != c.want {
						t.Errorf("compare_set(%s, %s, %s) = %q, %v; want %q", c.key, c.expected, c.desired, got, err, c.want)
					}
				}
				if k, err := s.NumKeys(ctx); err != nil || k != int64(n+2) {
					t.Errorf("num_keys = %d, %v; want %d", k, err, n+2)
				}
				if ok, err := s.DeleteKey(ctx, "winner"); err != nil || !ok {
					t.Errorf("delete_key(winner) = %t, %v; want true", ok, err)
				}
				if ok, err := s.DeleteKey(ctx, "winner"); err != nil || ok {
					t.Errorf("delete_key(winner) again = %t, %v; want false", ok, err)
				}
				if ok, _ := s.Check(ctx, []string{"winner"}); ok {
					t.Error("check(winner) after delete_key = true")
				}
				closeAll(t, stores)
			})
		}
	}
}

// parked waits until the holder has n gets or waits parked: the event a test waits for
// before it sets the keys they wait for.
func parked(s *Store, n int) {
	for {
		s.keys.mu.Lock()
		k := len(s.keys.waiting)
		s.keys.mu.Unlock()
		if k >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// A get and a wait that arrive before their keys are parked and answered by later sets,
// from another rank and from the holder itself.
func TestStoreGetWaitsForSet(t *testing.T) {
	ctx := context.Background()
	stores := startAll(t, 3, 0)
	type got struct {
		v   []byte
		err error
	}
	get, wait := make(chan got, 1), make(chan error, 1)
	go func() {
		v, err := stores[1].Get(ctx, "late", 0)
		get <- got{v, err}
	}()
	go func() { wait <- stores[0].Wait(ctx, []string{"late", "later"}, time.Minute) }()
	parked(stores[0], 2)
	if err := stores[2].Set(ctx, "late", []byte("here")); err != nil {
		t.Fatal(err)
	}
	if g := <-get; g.err != nil || string(g.v) != "here" {
		t.Fatalf("get late = %q, %v; want here", g.v, g.err)
	}
	if err := stores[0].Set(ctx, "later", nil); err != nil {
		t.Fatal(err)
	}
	if err := <-wait; err != nil {
		t.Fatal(err)
	}
	closeAll(t, stores)
}

// A wait or get that times out fails with an error naming the missing key, on the holder
// and on a client, and the store goes on serving.
func TestStoreWaitTimesOutNamingTheKey(t *testing.T) {
	ctx := context.Background()
	stores := startAll(t, 2, 0)
	for r, s := range stores {
		if err := s.Set(ctx, "present", []byte("1")); err != nil {
			t.Fatal(err)
		}
		err := s.Wait(ctx, []string{"present", "never-set"}, 20*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), `"never-set"`) || !strings.Contains(err.Error(), "timeout of 20ms") ||
			!strings.Contains(err.Error(), fmt.Sprintf("rank %d", r)) {
			t.Errorf("rank %d: wait for a key never set: %v; want an error naming the rank, the key and the timeout", r, err)
		}
		if _, err := s.Get(ctx, "never-set", time.Millisecond); err == nil || !strings.Contains(err.Error(), `key "never-set" not set`) {
			t.Errorf("rank %d: get of a key never set: %v", r, err)
		}
		if v, err := s.Get(ctx, "present", time.Second); err != nil || string(v) != "1" {
			t.Errorf("rank %d: get after a timeout = %q, %v; the store should go on serving", r, v, err)
		}
	}
	closeAll(t, stores)
}

// Closing the holder refuses the gets still waiting (nobody may set their keys any more) and
// returns once every client has closed.
func TestStoreCloseRefusesWaiting(t *testing.T) {
	ctx := context.Background()
	stores := startAll(t, 2, 0)
	errs := make(chan error, 1)
	go func() {
		_, err := stores[1].Get(ctx, "never-set", 0)
		errs <- err
	}()
	parked(stores[0], 1)
	closed := make(chan error, 1)
	go func() { closed <- stores[0].Close(ctx) }()
	if err := <-errs; err == nil || !strings.Contains(err.Error(), "closing") || !strings.Contains(err.Error(), `"never-set"`) {
		t.Fatalf("get on a closing holder: %v; want an error naming the key and the close", err)
	}
	if err := stores[1].Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

// A holder that closes while a client has not (it finishes later) returns when its context
// ends, without an error; the client's later calls fail naming the holder, and its Close
// returns without an error.
func TestStoreHolderClosesFirst(t *testing.T) {
	ctx := context.Background()
	stores := startAll(t, 2, 0)
	if err := stores[1].Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if err := stores[0].Close(gone); err != nil {
		t.Fatalf("holder's Close with a client still open: %v", err)
	}
	_, err := stores[1].Get(ctx, "k", time.Second)
	var se *service.Error
	if !errors.As(err, &se) || se.Peer != 0 || se.Rank != 1 {
		t.Fatalf("get after the holder closed: %v; want an error naming the holder", err)
	}
	if err := stores[1].Close(ctx); err != nil {
		t.Fatalf("client's Close after the holder closed: %v", err)
	}
}

// A call to a holder that never started its store ends at the caller's deadline, naming the
// store, the holder and the call, instead of waiting for good.
func TestStoreCallBoundedByContext(t *testing.T) {
	eps := transport.NewMemJob(2)
	s, err := Start(context.Background(), eps[1], Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Abort()
	c, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err = s.Set(c, "k", []byte("v"))
	var se *service.Error
	if !errors.As(err, &se) || se.Service != DefaultName || se.Peer != 0 || !strings.Contains(err.Error(), "set") ||
		!errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("set with no holder: %v; want the deadline, naming the store, the holder and the call", err)
	}
}

// What the store refuses: a call larger than its bound, a counter that is not one. The error
// names the key, and the store goes on serving.
func TestStoreRefusals(t *testing.T) {
	ctx := context.Background()
	stores := startAll(t, 2, 0)
	for r, s := range stores {
		if err := s.Set(ctx, "big", make([]byte, 5000)); err == nil || !strings.Contains(err.Error(), `key "big"`) || !strings.Contains(err.Error(), "at most 4096") {
			t.Errorf("rank %d: set of 5000 bytes: %v; want the bound and the key", r, err)
		}
		key := fmt.Sprintf("text%d", r)
		if err := s.Set(ctx, key, []byte("abc")); err != nil {
			t.Fatal(err)
		}
		var se *service.Error
		if _, err := s.Add(ctx, key, 1); !errors.As(err, &se) || se.Rank != r || !strings.Contains(err.Error(), fmt.Sprintf(`key "%s" holds "abc", not a counter`, key)) {
			t.Errorf("rank %d: add to a text value: %v", r, err)
		}
		if n, err := s.Add(ctx, "n", 2); err != nil || n < 2 {
			t.Errorf("rank %d: add after a refusal = %d, %v", r, n, err)
		}
	}
	// A timed-out wait for many long keys names a few of them, in part: the refusal stays
	// short whatever the keys.
	long := make([]string, 6)
	for i := range long {
		long[i] = fmt.Sprintf("%d%s", i, strings.Repeat("k", 600))
	}
	err := stores[1].Wait(ctx, long, time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "6 of its 6 keys") || !strings.Contains(err.Error(), `"0kkk`) || len(err.Error()) > 1024 {
		t.Errorf("wait for 6 long keys: %d bytes of error: %.300v", len(fmt.Sprint(err)), err)
	}
	if _, err := Start(ctx, transport.NewMemJob(2)[0], Config{Holder: 2}); err == nil || !strings.Contains(err.Error(), "holder rank 2 out of range") {
		t.Errorf("holder out of range: %v", err)
	}
	closeAll(t, stores)
}

// A request the holder cannot read is refused with an error, and the holder goes on.
func TestStoreMalformedRequest(t *testing.T) {
	for _, c := range []struct {
		body []byte
		n    int
		want string
	}{
		{[]byte{5, 'a'}, 1, "overruns"},
		{[]byte{1, 'a', 'b'}, 1, "1 bytes after"},
	} {
		if _, err := split(c.body, c.n); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("split(%v, %d) = %v, want %q", c.body, c.n, err, c.want)
		}
	}
}
