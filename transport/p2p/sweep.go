package p2p

import (
	"bufio"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/hetsync/hetsync/transport/shm"
)

// staleAge is how old a leftover file must be before a joining rank removes it: longer than
// any join (JoinTimeout's default), so that even a rank that does not lock its files (an
// older release) is past the join that reads them before they are taken.
const staleAge = 2 * time.Minute

var (
	// socketName and proofName are the names of unixSocketPath and newProofFile.
	socketName = regexp.MustCompile(`^hetsync-[0-9a-f]{16}-[0-9]+\.sock$`)
	proofName  = regexp.MustCompile(`^` + proofPrefix + `[0-9a-f]{16}-[0-9]+-[0-9a-f]{16}$`)
)

// sweepLeftovers removes what ranks of earlier jobs on this host left behind when they were
// killed before they could clean up: shared-memory segments and host-proof files in shmDir
// that no process holds (a live rank holds a lock on each, shm.HoldLock), and Unix sockets in
// sockDir that no process listens on. It never takes a live job's file. Failures are only
// logged: a leftover costs space in a tmpfs, not correctness.
func sweepLeftovers(log *slog.Logger, shmDir, sockDir string, minAge time.Duration) {
	segs, err := shm.SweepStale(shmDir, minAge)
	report(log, "shared-memory segments", segs, err)
	proofs, err := shm.SweepUnheld(shmDir, minAge, proofName.MatchString)
	report(log, "host-proof files", proofs, err)
	socks, err := sweepSockets(sockDir, minAge)
	report(log, "unix sockets", socks, err)
}

func report(log *slog.Logger, what string, removed []string, err error) {
	if len(removed) > 0 {
		log.Debug("hetsync: removed stale "+what+" of killed ranks", "count", len(removed), "first", removed[0])
	}
	if err != nil {
		log.Warn("hetsync: sweeping stale "+what, "err", err)
	}
}

// sweepSockets removes the rank sockets in dir that belong to this user, are at least minAge
// old and that nothing listens on: not among this network namespace's listening sockets, and
// a connection to it is refused (a listener in another namespace of the host still answers).
func sweepSockets(dir string, minAge time.Duration) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var listening map[string]bool
	var removed []string
	var errs []error
	for _, e := range ents {
		if !socketName.MatchString(e.Name()) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		fi, err := os.Lstat(path)
		if err != nil || fi.Mode().Type() != os.ModeSocket || !ownedByMe(fi) || time.Since(fi.ModTime()) < minAge {
			continue
		}
		if listening == nil {
			listening = listeningSockets()
		}
		if listening[path] || !refused(path) {
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, path)
	}
	return removed, errors.Join(errs...)
}

// listeningSockets are the paths of the Unix sockets bound in this network namespace
// (/proc/net/unix); empty when it cannot be read.
func listeningSockets() map[string]bool {
	out := map[string]bool{}
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 8 && strings.HasPrefix(fields[7], "/") {
			out[fields[7]] = true
		}
	}
	return out
}

// refused reports whether connecting to the socket at path is refused: nothing listens there.
func refused(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}
