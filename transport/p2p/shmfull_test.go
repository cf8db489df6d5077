package p2p

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hetsync/hetsync/transport"
	"github.com/hetsync/hetsync/transport/shm"
)

// shmFullEnv makes the test binary the child of TestShmFullSaysSo: in a mount namespace of its
// own it mounts a tmpfs too small for a pipe's segment on /dev/shm, joins two-rank jobs over
// it and prints a shmFullReport.
const shmFullEnv = "HETSYNC_P2P_SHM_FULL"

type shmFullReport struct {
	AutoErr, AutoLog, AutoPath string
	ShmErr                     string
}

func shmFullChild() int {
	if err := syscall.Mount("tmpfs", shm.DefaultDir, "tmpfs", 0, "size=64k"); err != nil {
		fmt.Fprintln(os.Stderr, "shm-full child: mounting a small /dev/shm:", err)
		return 3
	}
	var rep shmFullReport
	var autoLog lockedBuffer
	eps, err := joinPair(DataPathAuto, 20*time.Second, slog.New(slog.NewTextHandler(&autoLog, nil)))
	rep.AutoLog = autoLog.String()
	if err != nil {
		rep.AutoErr = err.Error()
	} else {
		rep.AutoPath = connPath(linksOf(eps[0])[1])
		closeAll(eps)
	}
	// The listening rank waits for its dialer until the join timeout: keep it short.
	if eps, err := joinPair(DataPathShm, 2*time.Second, quiet); err != nil {
		rep.ShmErr = err.Error()
	} else {
		closeAll(eps)
	}
	b, _ := json.Marshal(rep)
	fmt.Printf("%s\n", b)
	return 0
}

// joinPair joins both ranks of a two-rank job in this process over path, or returns rank 0's
// error, else rank 1's.
func joinPair(path string, timeout time.Duration, log *slog.Logger) ([]transport.Endpoint, error) {
	cfg := Config{Size: 2, Secret: "shm full " + path, DataPath: path, Security: SecurityNone,
		JoinTimeout: timeout, ArenaBytes: -1, Logger: log, Rendezvous: "127.0.0.1:0"}
	addrc := make(chan string, 1)
	res := [2]chan result{make(chan result, 1), make(chan result, 1)}
	go func() {
		ep, err := join(context.Background(), cfg, &hooks{bound: func(a string) { addrc <- a }})
		res[0] <- result{ep, err}
	}()
	var addr string
	select {
	case addr = <-addrc:
	case r := <-res[0]:
		return nil, r.err
	}
	go func() {
		c := cfg
		c.Rank, c.Rendezvous = 1, addr
		ep, err := join(context.Background(), c, nil)
		res[1] <- result{ep, err}
	}()
	r0, r1 := <-res[0], <-res[1]
	if r0.err != nil || r1.err != nil {
		closeAll([]transport.Endpoint{r0.ep, r1.ep})
		if r0.err != nil {
			return nil, r0.err
		}
		return nil, r1.err
	}
	return []transport.Endpoint{r0.ep, r1.ep}, nil
}

// A /dev/shm too full for a pipe's segment: the shm path fails saying so, with sizes, and auto
// falls back to a Unix socket with one warning that says so, instead of connections that end
// before their hello ("no hello from connection ... EOF").
func TestShmFullSaysSo(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil || os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("unshare: %v, uid %d (CI runs as root with util-linux)", err, os.Geteuid())
		}
		t.Skip("needs root and unshare(1) for a mount namespace with its own /dev/shm")
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), shmFullEnv+"=1")
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, stderr.String())
	}
	var rep shmFullReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("child printed %q: %v\n%s", out, err, stderr.String())
	}
	if !strings.Contains(rep.ShmErr, "/dev/shm is full: ") || !strings.Contains(rep.ShmErr, "of its 0.1 MiB free") {
		t.Errorf("the shm path's error: %q, want /dev/shm named full with its size", rep.ShmErr)
	}
	if rep.AutoErr != "" || rep.AutoPath != DataPathUnix {
		t.Errorf("auto: path %q, error %q; want the job formed over Unix sockets", rep.AutoPath, rep.AutoErr)
	}
	if strings.Count(rep.AutoLog, "shared memory is full") != 1 || !strings.Contains(rep.AutoLog, "/dev/shm is full") ||
		strings.Contains(rep.AutoLog, "no hello") {
		t.Errorf("auto's log, want one warning naming /dev/shm full and no orphan connection:\n%s", rep.AutoLog)
	}
}
