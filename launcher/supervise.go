package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// supervisorGrace is how long ranks get between SIGTERM and SIGKILL when the supervisor itself
// is told to stop by a signal (the launcher sends its own SIGTERM and SIGKILL otherwise).
const supervisorGrace = 3 * time.Second

// Supervise is the host side of a multi-host job: `hetsync _supervise`, started once per host
// over SSH. It starts the ranks the launcher asks for on in (start frames), each in its own
// process group as LocalSpawner does, sends their output and how they ended back on out, and
// signals them when the launcher says so. When in ends (the launcher or its connection died)
// every rank still running is killed at once; when ctx ends (the supervisor got SIGTERM,
// SIGINT or SIGHUP) they get SIGTERM, then SIGKILL after a grace period. It returns once no
// rank of its own is left running: nil after the launcher closed in, else why it stopped.
func Supervise(ctx context.Context, in io.Reader, out io.Writer) error {
	fw := &frameWriter{w: out}
	if err := fw.write(frameHello, 0, []byte(supervisorProtocol)); err != nil {
		return fmt.Errorf("supervisor: greeting the launcher: %w", err)
	}
	type request struct {
		kind    byte
		rank    int
		payload []byte
	}
	reqs := make(chan request)
	readErr := make(chan error, 1)
	stopReading := make(chan struct{})
	defer close(stopReading)
	go func() {
		fr := &frameReader{r: in}
		for {
			kind, rank, payload, err := fr.read()
			if err != nil {
				readErr <- err
				return
			}
			select {
			case reqs <- request{kind, rank, append([]byte(nil), payload...)}:
			case <-stopReading:
				return
			}
		}
	}()

	procs := map[int]Process{}
	exits := make(chan exitReport)
	var stopErr error
	var killTimer <-chan time.Time
	ctxDone := ctx.Done()
	stopAll := func(sig func(Process) error) {
		for _, p := range procs {
			_ = sig(p)
		}
	}
	for stopErr == nil || len(procs) > 0 {
		select {
		case r := <-reqs:
			if stopErr != nil {
				continue // stopping: start nothing more
			}
			p := procs[r.rank]
			switch r.kind {
			case frameStart:
				if p != nil {
					stopErr = fmt.Errorf("supervisor: the launcher started rank %d twice", r.rank)
					stopAll(Process.Kill)
					continue
				}
				if p = startRank(fw, r.rank, r.payload); p != nil {
					procs[r.rank] = p
					go func(rank int, p Process) { exits <- exitReport{rank, p.Wait()} }(r.rank, p)
				}
			case frameTerminate:
				if p != nil {
					_ = p.Terminate()
				}
			case frameKill:
				if p != nil {
					_ = p.Kill()
				}
			default:
				stopErr = fmt.Errorf("supervisor: unknown request %q for rank %d", r.kind, r.rank)
				stopAll(Process.Kill)
			}
		case err := <-readErr:
			// The launcher closed its end or is gone: nobody is left to stop the ranks.
			stopErr = err
			stopAll(Process.Kill)
		case <-ctxDone:
			ctxDone = nil
			if stopErr == nil {
				stopErr = context.Cause(ctx)
			}
			stopAll(Process.Terminate)
			killTimer = time.After(supervisorGrace)
		case <-killTimer:
			killTimer = nil
			stopAll(Process.Kill)
		case rep := <-exits:
			delete(procs, rep.rank)
			// A launcher that has gone cannot read this; the ranks are stopped all the same.
			_ = fw.write(frameExit, rep.rank, exitPayload(rep.exit))
		}
	}
	if errors.Is(stopErr, io.EOF) {
		return nil
	}
	return stopErr
}

// startRank starts one rank as the launcher asked, or reports on fw why it could not (exit
// status 127 or 126, as a shell would) and returns nil.
func startRank(fw *frameWriter, rank int, payload []byte) Process {
	fail := func(code int, format string, args ...any) Process {
		msg := fmt.Sprintf("hetsync: rank %d: "+format+"\n", append([]any{rank}, args...)...)
		_ = fw.write(frameStderr, rank, []byte(msg))
		_ = fw.write(frameExit, rank, exitPayload(Exit{Code: code}))
		return nil
	}
	var req startRequest
	if err := json.Unmarshal(payload, &req); err != nil {
		return fail(127, "malformed start request from the launcher: %v", err)
	}
	host, _ := os.Hostname()
	if req.Host != "" {
		host = req.Host
	}
	dir := req.Dir
	if dir != "" {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			if req.MustDir {
				return fail(127, "cannot change to the directory %s on host %s (--remote-dir)", dir, host)
			}
			dir = "" // the login directory, as a plain `ssh host cmd` would run in
		}
	}
	p, err := LocalSpawner{}.Spawn(context.Background(), ProcSpec{
		Rank: rank, Argv: req.Argv, Env: append(os.Environ(), req.Env...), Dir: dir,
		Stdout: streamWriter{fw, frameStdout, rank}, Stderr: streamWriter{fw, frameStderr, rank},
	})
	if err != nil {
		code := 126
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = 127
		}
		return fail(code, "on host %s: %v", host, err)
	}
	return p
}

func exitPayload(e Exit) []byte {
	n := exitNotice{Code: e.Code}
	if e.Signal != 0 {
		n.Signal = signalName(e.Signal)
	}
	if e.Err != nil {
		n.Err = e.Err.Error()
	}
	b, _ := json.Marshal(n)
	return b
}

// exit turns a supervisor's notice back into an Exit; host names the host in errors.
func (n exitNotice) exit(host string) Exit {
	switch {
	case n.Err != "":
		return Exit{Code: -1, Err: fmt.Errorf("host %s: %s", host, n.Err)}
	case n.Signal != "":
		if sig, ok := sshSignals[n.Signal]; ok {
			return Exit{Code: -1, Signal: sig}
		}
		return Exit{Code: -1, Err: fmt.Errorf("host %s: killed by signal SIG%s", host, n.Signal)}
	}
	return Exit{Code: n.Code}
}

// signalName is sig's name as RFC 4254 spells it ("TERM"), or its number for a signal without
// one there.
func signalName(sig syscall.Signal) string {
	for name, s := range sshSignals {
		if s == sig {
			return name
		}
	}
	return fmt.Sprint(int(sig))
}
