//go:build linux

package shm

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sweepChildEnv makes the test binary a rank that creates a segment in the named directory,
// prints its path and waits to be killed before it can unlink it.
const sweepChildEnv = "HETSYNC_SHM_SWEEP_CHILD"

func sweepChild(dir string) int {
	seg, err := Create(Options{Dir: dir, RingSize: MinRingSize})
	if err != nil {
		fmt.Fprintln(os.Stderr, "sweep child:", err)
		return 3
	}
	fmt.Println(seg.Path())
	select {} // until SIGKILL
}

// A segment whose creator was SIGKILLed before it unlinked the file is swept; one whose
// creator lives is not, however old, nor files that are not segments or not this user's.
func TestSweepStaleAfterSIGKILL(t *testing.T) {
	dir := t.TempDir()
	cmd, orphan := startChild(t, sweepChildEnv+"="+dir)

	live, err := Create(Options{Dir: dir, RingSize: MinRingSize})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	notSegment := filepath.Join(dir, "hetsync-shm-notasegment")
	if err := os.WriteFile(notSegment, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	// Every file is old enough (minAge 0): only the lock tells the live ones.
	if removed, err := SweepStale(dir, 0); err != nil || len(removed) != 0 {
		t.Fatalf("sweep with every creator alive removed %v (err %v)", removed, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if removed, err := SweepStale(dir, time.Hour); err != nil || len(removed) != 0 {
		t.Fatalf("sweep of files younger than minAge removed %v (err %v)", removed, err)
	}
	removed, err := SweepStale(dir, 0)
	if err != nil || !slices.Equal(removed, []string{orphan}) {
		t.Fatalf("sweep after the creator's SIGKILL removed %v (err %v), want only %s", removed, err, orphan)
	}
	for _, keep := range []string{live.Path(), notSegment} {
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("%s was swept: %v", keep, err)
		}
	}
	// The live segment still opens and pipes after the sweep.
	peer, err := Open(live.Name(), Options{Dir: dir})
	if err != nil {
		t.Fatalf("opening the live segment after the sweep: %v", err)
	}
	peer.Close()
}

// A stale segment of another user is not this process's to remove.
func TestSweepStaleLeavesOtherUsersFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making a file of another user needs root")
	}
	dir := t.TempDir()
	// A segment's name on a file nobody holds: what a dead creator leaves.
	path := filepath.Join(dir, namePrefix+strings.Repeat("ab", 16))
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Chown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if removed, err := SweepStale(dir, 0); err != nil || len(removed) != 0 {
		t.Errorf("swept another user's segment: %v (err %v)", removed, err)
	}
	if err := syscall.Chown(path, 0, 0); err != nil {
		t.Fatal(err)
	}
	if removed, err := SweepStale(dir, 0); err != nil || len(removed) != 1 {
		t.Errorf("after chown back: removed %v (err %v), want the segment", removed, err)
	}
}
