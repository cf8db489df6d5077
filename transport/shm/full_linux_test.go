package shm

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
)

// smallTmpfs mounts a tmpfs of size bytes on a fresh directory for t (root only; CI runs as
// root, so there a test that cannot mount fails).
func smallTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mounting a tmpfs on %s: %v (CI runs as root)", dir, err)
		}
		t.Skipf("mounting a tmpfs on %s: %v: run as root", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}

// A segment or an arena that a full tmpfs cannot hold is a *FullError naming the directory,
// what was wanted and what it has, and leaves no file behind.
func TestFullDirSaysSo(t *testing.T) {
	dir := smallTmpfs(t, "256k")
	_, err := Create(Options{Dir: dir, RingSize: DefaultRingSize, Peer: "rank 1"})
	var full *FullError
	if !errors.As(err, &full) || full.Dir != dir || full.Size != 256<<10 || full.Want <= full.Free {
		t.Fatalf("Create in a 256 KiB tmpfs = %v, want a *FullError of %s", err, dir)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "shm segment for rank 1: "+dir+" is full: ") || !strings.Contains(msg, "of its 0.2 MiB free") {
		t.Errorf("error %q", msg)
	}
	_, err = CreateArena(1<<20, ArenaOptions{Dir: dir, Ranks: 2})
	if !errors.As(err, &full) {
		t.Errorf("CreateArena in a 256 KiB tmpfs = %v, want a *FullError", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("files left in %s: %v", dir, left)
	}
}
