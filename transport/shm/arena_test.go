//go:build linux

package shm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// arenaChildEnv makes the test binary rank 1 of a two-rank arena: "create" makes one in the
// directory HETSYNC_ARENA_DIR, prints its path and waits to be killed; "pingpong" opens the
// arena HETSYNC_ARENA_NAME, prints "ready" and answers every ping (word 0) with a pong
// (word 4) HETSYNC_ARENA_ROUNDS times, then waits on word 8 (to be killed).
const arenaChildEnv = "HETSYNC_ARENA_CHILD"

func arenaChild(mode string) int {
	dir := os.Getenv("HETSYNC_ARENA_DIR")
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "arena child:", err)
		return 3
	}
	switch mode {
	case "create":
		a, err := CreateArena(4096, ArenaOptions{Dir: dir, Ranks: 2})
		if err != nil {
			return fail(err)
		}
		fmt.Println(a.path)
		select {} // until SIGKILL
	case "pingpong":
		a, err := OpenArena(os.Getenv("HETSYNC_ARENA_NAME"), ArenaOptions{Dir: dir, Ranks: 2, Rank: 1})
		if err != nil {
			return fail(err)
		}
		a.Watch()
		fmt.Println("ready")
		rounds, _ := strconv.Atoi(os.Getenv("HETSYNC_ARENA_ROUNDS"))
		ctx := context.Background()
		for i := range uint32(rounds) {
			if err := a.Wait(ctx, 0, i); err != nil {
				return fail(err)
			}
			arenaWord(a, 4).Store(i + 1)
			a.Wake(4)
		}
		if err := a.Wait(ctx, 8, 0); err != nil {
			return fail(err)
		}
		return 0
	}
	return fail(fmt.Errorf("unknown mode %q", mode))
}

func arenaWord(a *Arena, off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&a.Bytes()[off]))
}

// startChild runs the test binary with env added (TestMain picks the child's part from it),
// kills it when the test ends, and returns it with the first line it printed.
func startChild(t *testing.T, env ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the child's first line: %v", err)
	}
	return cmd, strings.TrimSpace(line)
}

// startArenaChild runs the test binary as rank 1 of the arena a (mode pingpong) and returns
// once it mapped it.
func startArenaChild(t *testing.T, a *Arena, dir string, rounds int) *exec.Cmd {
	t.Helper()
	cmd, line := startChild(t, arenaChildEnv+"=pingpong", "HETSYNC_ARENA_DIR="+dir,
		"HETSYNC_ARENA_NAME="+a.Name(), "HETSYNC_ARENA_ROUNDS="+strconv.Itoa(rounds))
	if line != "ready" {
		t.Fatalf("the child did not map the arena: %q", line)
	}
	return cmd
}

// newJobArenas makes the arenas of an in-process job of n ranks: rank 0 creates, the others
// open, and the file is unlinked.
func newJobArenas(t *testing.T, dir string, n, size int) []*Arena {
	t.Helper()
	as := make([]*Arena, n)
	var err error
	if as[0], err = CreateArena(size, ArenaOptions{Dir: dir, Ranks: n}); err != nil {
		t.Fatal(err)
	}
	for r := 1; r < n; r++ {
		if as[r], err = OpenArena(as[0].Name(), ArenaOptions{Dir: dir, Ranks: n, Rank: r}); err != nil {
			t.Fatal(err)
		}
	}
	if err := as[0].Unlink(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, a := range as {
			a.Close()
		}
	})
	return as
}

func TestArenaRanksShareBytes(t *testing.T) {
	for n := 1; n <= 9; n++ {
		for _, size := range []int{1, 4093, 3 << 20} {
			t.Run(fmt.Sprintf("ranks=%d/size=%d", n, size), func(t *testing.T) {
				dir := t.TempDir()
				as := newJobArenas(t, dir, n, size)
				if ents, _ := os.ReadDir(dir); len(ents) != 0 {
					t.Fatalf("%d files left after Unlink", len(ents))
				}
				for r, a := range as {
					b := a.Bytes()
					if len(b) < size || len(b)%4096 != 0 || uintptr(unsafe.Pointer(&b[0]))%4096 != 0 {
						t.Fatalf("rank %d: %d bytes at %p, want at least %d, page-aligned", r, len(b), &b[0], size)
					}
					if !a.Mapped(r) {
						t.Fatalf("rank %d: its own slot does not say mapped", r)
					}
					for i := r; i < size; i += n {
						if b[i] != 0 {
							t.Fatalf("rank %d: byte %d is %d before anyone wrote", r, i, b[i])
						}
						b[i] = byte(r + 1)
					}
				}
				for r, a := range as {
					b := a.Bytes()
					for i := range size {
						if b[i] != byte(i%n+1) {
							t.Fatalf("rank %d sees byte %d = %d, want %d", r, i, b[i], i%n+1)
						}
					}
				}
			})
		}
	}
}

// Wait and Wake between two processes: a ping-pong of 200 rounds, each round one futex wake
// each way; with Poll this side mostly finds the word changed while it yields.
func TestArenaWaitWakeAcrossProcesses(t *testing.T) {
	for _, o := range []ArenaOptions{{}, {Spin: true}, {Poll: 50 * time.Millisecond}} {
		t.Run(fmt.Sprintf("spin=%v/poll=%v", o.Spin, o.Poll), func(t *testing.T) {
			dir := t.TempDir()
			a, err := CreateArena(4096, ArenaOptions{Dir: dir, Ranks: 2, Spin: o.Spin, Poll: o.Poll})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			const rounds = 200
			cmd := startArenaChild(t, a, dir, rounds)
			if err := a.Unlink(); err != nil {
				t.Fatal(err)
			}
			a.Watch()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for i := range uint32(rounds) {
				arenaWord(a, 0).Store(i + 1)
				a.Wake(0)
				if err := a.Wait(ctx, 4, i); err != nil {
					t.Fatalf("round %d: %v", i, err)
				}
				if got := arenaWord(a, 4).Load(); got != i+1 {
					t.Fatalf("round %d: pong %d", i, got)
				}
			}
			arenaWord(a, 8).Store(1)
			a.Wake(8)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("the child: %v", err)
			}
		})
	}
}

// A rank whose process is killed fails the other's Wait, naming it, instead of leaving it
// asleep: the wait below has no other way out but its context of a minute.
func TestArenaWaitRankKilled(t *testing.T) {
	dir := t.TempDir()
	a, err := CreateArena(4096, ArenaOptions{Dir: dir, Ranks: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	cmd := startArenaChild(t, a, dir, 0)
	a.Unlink()
	a.Watch()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Wait(ctx, 64, 0) }()
	time.Sleep(10 * time.Millisecond)
	cmd.Process.Kill()
	err = <-done
	if err == nil || !errors.Is(err, ErrPeerGone) || !strings.Contains(err.Error(), "rank 1 (process "+strconv.Itoa(cmd.Process.Pid)+") exited") {
		t.Fatalf("Wait while rank 1 is killed: %v", err)
	}
}

// Every way out of a Wait but the word: the context, this rank's Close, another rank's Close
// and the caller's own verdict (ArenaOptions.Gone); and a word that changed returns nil. Each
// also with a Wait that polls its word first (ArenaOptions.Poll). The act comes once Wait has
// begun, and 5 ms later, so that it usually finds Wait past its poll and asleep; the verdict
// does not depend on where Wait is.
func TestArenaWaitEnds(t *testing.T) {
	goneErr := errors.New("rank 2 is unresponsive")
	cases := []struct {
		name string
		gone func() error
		act  func(as []*Arena, cancel context.CancelFunc)
		want string
	}{
		{"word changed", nil, func(as []*Arena, _ context.CancelFunc) { arenaWord(as[1], 64).Store(1); as[1].Wake(64) }, ""},
		{"context", nil, func(_ []*Arena, cancel context.CancelFunc) { cancel() }, context.Canceled.Error()},
		{"own close", nil, func(as []*Arena, _ context.CancelFunc) { as[0].Close() }, "rank 0: the arena is closed"},
		{"other's close", nil, func(as []*Arena, _ context.CancelFunc) { as[2].Close() }, "rank 2 closed its arena"},
		{"gone", func() error { return goneErr }, func([]*Arena, context.CancelFunc) {}, goneErr.Error()},
	}
	for _, tc := range cases {
		for _, poll := range []time.Duration{0, time.Millisecond} {
			t.Run(fmt.Sprintf("%s/poll=%v", tc.name, poll), func(t *testing.T) {
				dir := t.TempDir()
				as := newJobArenas(t, dir, 3, 4096)
				as[0].gone, as[0].poll = tc.gone, poll
				for _, a := range as {
					a.Watch()
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				done := make(chan error, 1)
				go func() { done <- as[0].Wait(ctx, 64, 0) }()
				for as[0].waiting.Load() == 0 {
					runtime.Gosched()
				}
				time.Sleep(5 * time.Millisecond)
				tc.act(as, cancel)
				err := <-done
				if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
					t.Fatalf("Wait: %v, want %q", err, tc.want)
				}
			})
		}
	}
}

func TestArenaWaitBadOffset(t *testing.T) {
	as := newJobArenas(t, t.TempDir(), 1, 4096)
	for _, off := range []int{-4, 2, 4096, 1 << 30} {
		if err := as[0].Wait(context.Background(), off, 0); err == nil || !strings.Contains(err.Error(), "rank 0") {
			t.Errorf("Wait at %d: %v", off, err)
		}
		as[0].Wake(off) // ignored, no panic
	}
}

func TestOpenArenaRejects(t *testing.T) {
	dir := t.TempDir()
	a, err := CreateArena(4096, ArenaOptions{Dir: dir, Ranks: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	bogus := arenaPrefix + strings.Repeat("0", 32)
	if err := os.WriteFile(filepath.Join(dir, bogus), make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	notFile := arenaPrefix + strings.Repeat("1", 32)
	if err := syscall.Mkfifo(filepath.Join(dir, notFile), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		file  string
		opts  ArenaOptions
		wants string
	}{
		{"bad name", "../etc/passwd", ArenaOptions{Dir: dir, Ranks: 3, Rank: 1}, "not an arena name"},
		{"missing", arenaPrefix + strings.Repeat("2", 32), ArenaOptions{Dir: dir, Ranks: 3, Rank: 1}, "opening"},
		{"fifo", notFile, ArenaOptions{Dir: dir, Ranks: 3, Rank: 1}, "not a regular file"},
		{"bad magic", bogus, ArenaOptions{Dir: dir, Ranks: 3, Rank: 1}, "bad magic"},
		{"other rank count", a.Name(), ArenaOptions{Dir: dir, Ranks: 4, Rank: 1}, "made for 3 ranks"},
		{"rank out of range", a.Name(), ArenaOptions{Dir: dir, Ranks: 3, Rank: 3}, "rank 3 out of range"},
		{"no ranks", a.Name(), ArenaOptions{Dir: dir}, "0 ranks"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := OpenArena(tc.file, tc.opts)
			if err == nil {
				b.Close()
				t.Fatal("opened")
			}
			if !strings.Contains(err.Error(), tc.wants) {
				t.Fatalf("%v, want %q", err, tc.wants)
			}
		})
	}
	if _, err := CreateArena(0, ArenaOptions{Dir: dir, Ranks: 1}); err == nil || !strings.Contains(err.Error(), "size 0") {
		t.Errorf("CreateArena of 0 bytes: %v", err)
	}
}

// An arena whose creator was killed before it unlinked the file is swept; a live creator's is
// not, and Close removes the file of a creator that never called Unlink.
func TestArenaSweptAfterSIGKILL(t *testing.T) {
	dir := t.TempDir()
	cmd, orphan := startChild(t, arenaChildEnv+"=create", "HETSYNC_ARENA_DIR="+dir)
	live, err := CreateArena(4096, ArenaOptions{Dir: dir, Ranks: 2})
	if err != nil {
		t.Fatal(err)
	}
	if removed, err := SweepStale(dir, 0); err != nil || len(removed) != 0 {
		t.Fatalf("sweep with both creators alive removed %v (err %v)", removed, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if removed, err := SweepStale(dir, 0); err != nil || !slices.Equal(removed, []string{orphan}) {
		t.Fatalf("sweep after the creator's SIGKILL removed %v (err %v), want %s", removed, err, orphan)
	}
	if err := live.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("%s is left after Close", ents[0].Name())
	}
}

// After Close the range reads zeros instead of faulting: a collective that an endpoint's
// Close interrupts does not crash its process.
func TestArenaCloseLeavesNoFault(t *testing.T) {
	as := newJobArenas(t, t.TempDir(), 2, 4096)
	b := as[0].Bytes()
	b[100] = 7
	if as[1].Bytes()[100] != 7 {
		t.Fatal("not shared")
	}
	if err := as[0].Close(); err != nil {
		t.Fatal(err)
	}
	if b[100] != 0 {
		t.Fatalf("after Close the range holds %d, want the zero of a private page", b[100])
	}
	b[100] = 9 // no fault, and no effect on the other rank
	if as[1].Bytes()[100] != 7 {
		t.Fatal("a write after Close reached the other rank")
	}
	if as[1].Mapped(0) || !as[1].Mapped(1) {
		t.Fatal("rank 0's slot does not say closed, or rank 1's does not say mapped")
	}
	if err := as[0].Wait(context.Background(), 0, 0); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
}
