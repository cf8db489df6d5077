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

// A job's join sweeps what a killed job left on the host: a segment and a host-proof file in
// /dev/shm and a socket in TMPDIR, all older than staleAge, are gone once a job has formed.
func TestJoinSweepsKilledRanksFiles(t *testing.T) {
	if _, err := os.Stat(shm.DefaultDir); err != nil {
		t.Skipf("no %s on this system", shm.DefaultDir)
	}
	sockDir := t.TempDir()
	t.Setenv("TMPDIR", sockDir)
	old := time.Now().Add(-2 * staleAge)
	dead := newJobTag("killed " + t.Name())
	seg := filepath.Join(shm.DefaultDir, "hetsync-shm-"+strings.Repeat("de", 16))
	proof := filepath.Join(shm.DefaultDir, proofPrefix+dead.String()+"-1-"+strings.Repeat("ad", 8))
	for _, p := range []string{seg, proof} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(p) })
	}
	sock := unixSocketPath(dead, 1)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	for _, p := range []string{seg, proof, sock} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	startJob(t, Config{Size: 2, Secret: "sweeper " + t.Name(), Security: SecurityNone, JoinTimeout: 20 * time.Second, Logger: quiet}, nil)
	for _, p := range []string{seg, proof, sock} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s of a killed job is still there after a join", p)
		}
	}
}
