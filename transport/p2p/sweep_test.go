package p2p

import (
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport/shm"
)

// A joining rank removes what killed ranks left behind (segments, host-proof files, sockets
// nothing listens on) and nothing that a live rank holds, however old.
func TestSweepLeftovers(t *testing.T) {
	dir := t.TempDir()
	tag := newJobTag("sweep " + t.Name())
	file := func(name string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	listen := func(rank int, live bool) string {
		path := unixSocketPath(tag, rank)
		path = filepath.Join(dir, filepath.Base(path))
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		if live {
			t.Cleanup(func() { l.Close() })
		} else {
			l.SetUnlinkOnClose(false) // as if the process had been killed
			l.Close()
		}
		return path
	}
	liveSeg, err := shm.Create(shm.Options{Dir: dir, RingSize: shm.MinRingSize})
	if err != nil {
		t.Fatal(err)
	}
	defer liveSeg.Close()
	liveProof, err := newProofFile(dir, tag, 1)
	if err != nil || liveProof.path == "" {
		t.Fatalf("proof file: %v", err)
	}
	defer liveProof.remove()

	stale := []string{
		file("hetsync-shm-" + strings.Repeat("0f", 16)),
		file(proofPrefix + tag.String() + "-2-" + strings.Repeat("ab", 8)),
		listen(3, false),
	}
	kept := []string{
		liveSeg.Path(), liveProof.path, listen(4, true),
		file("hetsync-shm-not-ours"), file(proofPrefix + "x"), file("hetsync-other.sock"),
	}
	quiet := slog.New(slog.DiscardHandler)

	sweepLeftovers(quiet, dir, dir, time.Hour)
	for _, p := range append(stale, kept...) {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was removed although younger than the sweep's minimum age: %v", filepath.Base(p), err)
		}
	}
	sweepLeftovers(quiet, dir, dir, 0)
	for _, p := range stale {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("stale %s was left", filepath.Base(p))
		}
	}
	for _, p := range kept {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was removed: %v", filepath.Base(p), err)
		}
	}
}
