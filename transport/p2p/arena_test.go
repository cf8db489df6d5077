//go:build linux

package p2p

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/transport/shm"
)

// checkArenas checks that every rank of eps has an arena or none has (want), that the file is
// gone once the job formed, and that the ranks share its bytes and its words' wake-ups.
func checkArenas(t *testing.T, eps []transport.Endpoint, want bool) {
	t.Helper()
	arenas := make([]transport.Arena, len(eps))
	for r, ep := range eps {
		arenas[r] = transport.HostArena(ep)
		if (arenas[r] != nil) != want {
			t.Fatalf("rank %d has an arena: %v, want %v", r, arenas[r] != nil, want)
		}
		if want {
			name := ep.(*endpoint).arena.Name()
			if _, err := os.Stat(filepath.Join(shm.DefaultDir, name)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("rank %d: the arena file %s is still there after the join (%v)", r, name, err)
			}
		}
	}
	if !want {
		return
	}
	n := len(eps)
	free, err := shm.FreeBytes(shm.DefaultDir)
	if err != nil {
		t.Fatal(err)
	}
	// The default, or at least the floor where the shared-memory directory is small.
	least := minDefaultArenaBytes(n)
	if free/2 > 2*DefaultArenaBytes(n) {
		least = DefaultArenaBytes(n)
	}
	if len(arenas[0].Bytes()) < int(least) {
		t.Fatalf("the arena has %d bytes, want %d (%d free in %s)", len(arenas[0].Bytes()), least, free, shm.DefaultDir)
	}
	// Rank r writes byte 4096+r; then rank 0 bumps word 0 and every other rank waits for it.
	for r, a := range arenas {
		a.Bytes()[4096+r] = byte(r + 1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := 1; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = arenas[r].Wait(ctx, 0, 0)
		}()
	}
	transport.ArenaWord(arenas[0].Bytes(), 0).Store(1)
	arenas[0].Wake(0)
	wg.Wait()
	for r, a := range arenas {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		for q := range n {
			if got := a.Bytes()[4096+q]; got != byte(q+1) {
				t.Fatalf("rank %d reads %d at rank %d's byte, want %d", r, got, q, q+1)
			}
		}
	}
}

// Every rank of a one-host job over a path that may take shared memory has the arena, at
// every rank count.
func TestArenaFormed(t *testing.T) {
	for size := 1; size <= 9; size++ {
		path := []string{DataPathShm, DataPathAuto, DataPathCMA}[size%3]
		t.Run(fmt.Sprintf("%s/np%d", path, size), func(t *testing.T) {
			base := Config{Size: size, Secret: "arena " + t.Name(), DataPath: path, Security: SecurityNone,
				JoinTimeout: 30 * time.Second, Logger: quiet}
			eps := startJob(t, base, nil)
			checkArenas(t, eps, true)
			exchangeAll(t, eps)
		})
	}
}

// A job without an arena on one rank has none on any, and still works: a rank that does not
// want one, cannot map it, or does not share the host; rank 0 that cannot create one; a path
// that takes no shared memory.
// The default arena takes the collectives' whole layout where the shared-memory directory has
// room, half of what is free where it has less (a container's 64 MiB /dev/shm), and never
// less than the floor, which the arena's creation refuses when even that does not fit.
func TestFitArenaBytes(t *testing.T) {
	for _, tc := range []struct {
		ranks int
		free  int64
		want  int64
	}{
		{4, -1, DefaultArenaBytes(4)},
		{4, 24 << 30, DefaultArenaBytes(4)},
		{4, 2 * DefaultArenaBytes(4), DefaultArenaBytes(4)},
		{64, 24 << 30, DefaultArenaBytes(64)},
		{64, 64 << 20, 68 << 20},
		{64, 512 << 20, 256 << 20},
		{16, 64 << 20, 32 << 20},
		{8, 16 << 20, 12 << 20},
	} {
		if got := fitArenaBytes(tc.ranks, tc.free); got != tc.want {
			t.Errorf("%d ranks, %d bytes free: %d, want %d", tc.ranks, tc.free, got, tc.want)
		}
	}
	if DefaultArenaBytes(64) != 130*(4<<20)+1<<20+64*128 || DefaultArenaBytes(4) != 10*(1<<20)+1<<20+4*128 {
		t.Errorf("default arenas %d (64 ranks), %d (4 ranks): not 2p+2 slots of max(1 MiB, p × 64 KiB) and 1 MiB + 128 bytes a rank",
			DefaultArenaBytes(64), DefaultArenaBytes(4))
	}
}

func TestArenaNoneAnywhere(t *testing.T) {
	failOn := func(rank int) func(int) error {
		return func(r int) error {
			if r == rank {
				return fmt.Errorf("rank %d: mapping refused by the test", r)
			}
			return nil
		}
	}
	offOn := func(rank int) func(int, *Config) {
		return func(r int, c *Config) {
			if r == rank {
				c.ArenaBytes = -1
			}
		}
	}
	cases := []struct {
		name     string
		size     int
		dataPath string
		perRank  func(int, *Config)
		arenaMap func(int) error
	}{
		{"rank 0 turned off", 3, DataPathShm, offOn(0), nil},
		{"last rank turned off", 4, DataPathAuto, offOn(3), nil},
		{"rank 0 cannot create", 5, DataPathShm, nil, failOn(0)},
		{"rank 2 cannot map", 3, DataPathShm, nil, failOn(2)},
		{"rank 1 cannot map", 9, DataPathAuto, nil, failOn(1)},
		{"two hosts", 4, DataPathAuto, twoHosts, nil},
		{"tcp", 3, DataPathTCP, nil, nil},
		{"unix", 2, DataPathUnix, nil, nil},
		{"single rank turned off", 1, DataPathShm, offOn(0), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := Config{Size: tc.size, Secret: "no arena " + t.Name(), DataPath: tc.dataPath, Security: SecurityNone,
				JoinTimeout: 30 * time.Second, Logger: quiet}
			eps := startJobWith(t, base, tc.perRank, hooks{arenaMap: tc.arenaMap})
			checkArenas(t, eps, false)
			exchangeAll(t, eps)
		})
	}
}

// waitOnChild starts a two-rank job of base whose rank 1 is a child process (killedChild) and
// has rank 0 wait on a word of the arena that nobody changes, for a minute at most. It
// returns the child and the wait's result.
func waitOnChild(t *testing.T, base Config) (*exec.Cmd, <-chan error) {
	t.Helper()
	r0, cmd, out, stderr := startKilledChild(t, base, DataPathShm)
	a := transport.HostArena(r0.ep)
	if a == nil {
		t.Fatal("rank 0 of a one-host shm job has no arena")
	}
	line := make([]byte, 6)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "ready\n" {
		t.Fatalf("child: %q, %v; stderr: %s", line, err, stderr.String())
	}
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		errc <- a.Wait(ctx, 64, 0)
	}()
	return cmd, errc
}

// A rank whose process is killed fails the waits of the others on the arena, naming it,
// however long their own context: the wait below would otherwise sleep for a minute.
func TestArenaWaitRankKilled(t *testing.T) {
	base := Config{Size: 2, Secret: "arena rank killed", DataPath: DataPathShm, Security: SecurityNone,
		JoinTimeout: 30 * time.Second, Logger: quiet}
	cmd, errc := waitOnChild(t, base)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	err := <-errc
	if err == nil || !errors.Is(err, shm.ErrPeerGone) || !strings.Contains(err.Error(), "rank 1 (process "+strconv.Itoa(cmd.Process.Pid)+")") {
		t.Fatalf("an arena wait while rank 1 is killed: %v", err)
	}
}

// A rank that closes its endpoint fails the others' waits naming it; the closed endpoint's own
// arena refuses waits.
func TestArenaWaitRankClosed(t *testing.T) {
	base := Config{Size: 3, Secret: "arena rank closed", DataPath: DataPathShm, Security: SecurityNone,
		JoinTimeout: 30 * time.Second, Logger: quiet}
	eps := startJob(t, base, nil)
	a := transport.HostArena(eps[0])
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		errc <- a.Wait(ctx, 64, 0)
	}()
	if err := eps[2].Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err == nil || !strings.Contains(err.Error(), "rank 2 closed its arena") {
		t.Fatalf("an arena wait while rank 2 closes: %v", err)
	}
	if err := transport.HostArena(eps[2]).Wait(context.Background(), 64, 0); err == nil {
		t.Fatal("a closed endpoint's arena waited")
	}
}

// A rank frozen by SIGSTOP fails the others' arena waits once the heartbeats fail it, with
// their error naming it: its process lives, so only the heartbeats can tell.
func TestArenaWaitRankStopped(t *testing.T) {
	base := Config{Size: 2, Secret: "arena rank stopped", DataPath: DataPathShm, Security: SecurityNone,
		JoinTimeout: 30 * time.Second, PeerTimeout: time.Second, Logger: quiet}
	cmd, errc := waitOnChild(t, base)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	err := <-errc
	var ue *transport.UnresponsiveError
	if !errors.As(err, &ue) || ue.Peer != 1 || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("an arena wait while rank 1 is stopped: %v; want the heartbeats' error naming rank 1 as stopped", err)
	}
	// Stopped perhaps before its first heartbeat came: the kernel says it is stopped, so it
	// gets the peer timeout, not the join timeout that a rank still joining is given.
	if ue.Limit != base.PeerTimeout || ue.LimitFrom != "" {
		t.Fatalf("rank 1, stopped, was failed at the limit %v (%s); want the peer timeout, %v", ue.Limit, ue.LimitFrom, base.PeerTimeout)
	}
}
