package launcher

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// supervised is a Supervise running in this process, driven the way a launcher drives it.
type supervised struct {
	t    *testing.T
	in   *io.PipeWriter
	fw   *frameWriter
	fr   *frameReader
	done chan error
}

func startSupervised(t *testing.T) *supervised {
	t.Helper()
	return startSupervisedCtx(t, context.Background())
}

// startSupervisedCtx is startSupervised with ctx standing for the supervisor's signals.
func startSupervisedCtx(t *testing.T, ctx context.Context) *supervised {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	s := &supervised{t: t, in: inW, fw: &frameWriter{w: inW}, fr: &frameReader{r: outR}, done: make(chan error, 1)}
	go func() {
		err := Supervise(ctx, inR, outW)
		outW.Close()
		s.done <- err
	}()
	t.Cleanup(func() {
		inW.Close()
		go func() { _, _ = io.Copy(io.Discard, outR) }()
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			t.Errorf("the supervisor did not return after its input closed")
		}
	})
	kind, _, payload, err := s.fr.read()
	if err != nil || kind != frameHello || string(payload) != supervisorProtocol {
		t.Fatalf("first frame %q %q, %v; want the hello", kind, payload, err)
	}
	return s
}

func (s *supervised) start(rank int, req startRequest) {
	s.t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.fw.write(frameStart, rank, b); err != nil {
		s.t.Fatal(err)
	}
}

// collect reads frames until n ranks have exited, returning each rank's output and exit.
func (s *supervised) collect(n int) (stdout, stderr map[int]string, exits map[int]exitNotice) {
	s.t.Helper()
	stdout, stderr, exits = map[int]string{}, map[int]string{}, map[int]exitNotice{}
	for len(exits) < n {
		kind, rank, payload, err := s.fr.read()
		if err != nil {
			s.t.Fatalf("after %d exits: %v", len(exits), err)
		}
		switch kind {
		case frameStdout:
			stdout[rank] += string(payload)
		case frameStderr:
			stderr[rank] += string(payload)
		case frameExit:
			var e exitNotice
			if err := json.Unmarshal(payload, &e); err != nil {
				s.t.Fatal(err)
			}
			if _, dup := exits[rank]; dup {
				s.t.Errorf("rank %d exited twice", rank)
			}
			exits[rank] = e
		default:
			s.t.Fatalf("unexpected frame %q for rank %d", kind, rank)
		}
	}
	return stdout, stderr, exits
}

func TestSuperviseRunsEveryRankOfAHost(t *testing.T) {
	for _, np := range []int{1, 2, 3, 5, 8, 9, 16} {
		t.Run(strconv.Itoa(np), func(t *testing.T) {
			s := startSupervised(t)
			for r := 0; r < np; r++ {
				s.start(r, startRequest{Argv: []string{"sh", "-c", `echo "out $R $SECRET"; echo "err $R" >&2; exit $((R % 7))`},
					Env: []string{"R=" + strconv.Itoa(r), "SECRET=s3"}})
			}
			stdout, stderr, exits := s.collect(np)
			for r := 0; r < np; r++ {
				if want := fmt.Sprintf("out %d s3\n", r); stdout[r] != want {
					t.Errorf("rank %d stdout %q, want %q", r, stdout[r], want)
				}
				if want := fmt.Sprintf("err %d\n", r); stderr[r] != want {
					t.Errorf("rank %d stderr %q, want %q", r, stderr[r], want)
				}
				if want := (exitNotice{Code: r % 7}); exits[r] != want {
					t.Errorf("rank %d exit %+v, want %+v", r, exits[r], want)
				}
			}
		})
	}
}

func TestSuperviseReportsHowRanksEnd(t *testing.T) {
	// A program found only through the PATH the launcher sends (-x PATH=...).
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "hetsync-test-prog"), []byte("#!/bin/sh\nexit 42\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		req    startRequest
		want   exitNotice
		stderr string
	}{
		{"signal", startRequest{Argv: []string{"sh", "-c", "kill -TERM $$"}}, exitNotice{Code: -1, Signal: "TERM"}, ""},
		{"not found", startRequest{Argv: []string{"/nonexistent/hetsync-rank"}, Host: "node7"}, exitNotice{Code: 127}, "rank 0: on host node7"},
		{"remote dir missing", startRequest{Argv: []string{"true"}, Dir: "/nonexistent/dir", MustDir: true, Host: "node7"},
			exitNotice{Code: 127}, "cannot change to the directory /nonexistent/dir on host node7 (--remote-dir)"},
		{"own dir missing", startRequest{Argv: []string{"true"}, Dir: "/nonexistent/dir"}, exitNotice{}, ""},
		{"dir", startRequest{Argv: []string{"sh", "-c", `[ "$(pwd)" = / ]`}, Dir: "/"}, exitNotice{}, ""},
		{"PATH from the launcher", startRequest{Argv: []string{"hetsync-test-prog"}, Env: []string{"PATH=relative/dir:" + bin + ":/usr/bin:/bin"}},
			exitNotice{Code: 42}, ""},
		{"not in the launcher's PATH", startRequest{Argv: []string{"sh"}, Env: []string{"PATH=" + bin}}, exitNotice{Code: 127}, "not found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := startSupervised(t)
			s.start(0, tc.req)
			_, stderr, exits := s.collect(1)
			if exits[0] != tc.want {
				t.Errorf("exit %+v, want %+v (stderr %q)", exits[0], tc.want, stderr[0])
			}
			if !strings.Contains(stderr[0], tc.stderr) {
				t.Errorf("stderr %q lacks %q", stderr[0], tc.stderr)
			}
		})
	}
}

func TestSuperviseSignalsAndStopsRanks(t *testing.T) {
	marker := strconv.Itoa(1_000_000 + rand.IntN(1_000_000))
	s := startSupervised(t)
	// Rank 0 ignores SIGTERM: only the kill stops it. Rank 1 stops at SIGTERM.
	s.start(0, startRequest{Argv: []string{"sh", "-c", `trap "" TERM; echo ready; sleep ` + marker + ` & wait`}})
	s.start(1, startRequest{Argv: []string{"sh", "-c", `echo ready; exec sleep ` + marker}})
	for ready := 0; ready < 2; {
		kind, rank, payload, err := s.fr.read()
		if err != nil || kind != frameStdout {
			t.Fatalf("rank %d: frame %q %q, %v; want its ready line", rank, kind, payload, err)
		}
		ready++
	}
	for _, r := range []int{0, 1} {
		if err := s.fw.write(frameTerminate, r, nil); err != nil {
			t.Fatal(err)
		}
	}
	_, _, exits := s.collect(1)
	if exits[1] != (exitNotice{Code: -1, Signal: "TERM"}) {
		t.Errorf("rank 1 after SIGTERM: %+v (rank 0: %+v)", exits[1], exits[0])
	}
	if err := s.fw.write(frameKill, 0, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, exits = s.collect(1); exits[0] != (exitNotice{Code: -1, Signal: "KILL"}) {
		t.Errorf("rank 0 after SIGKILL: %+v", exits[0])
	}
	waitNoProcesses(t, "sleep "+marker)
}

func TestSuperviseKillsItsRanksWhenTheLauncherGoes(t *testing.T) {
	marker := strconv.Itoa(1_000_000 + rand.IntN(1_000_000))
	s := startSupervised(t)
	for r := 0; r < 3; r++ {
		s.start(r, startRequest{Argv: []string{"sh", "-c", `trap "" TERM; sleep ` + marker + ` & echo ready; wait`}})
	}
	for ready := 0; ready < 3; ready++ {
		if kind, rank, payload, err := s.fr.read(); err != nil || kind != frameStdout {
			t.Fatalf("rank %d: frame %q %q, %v; want its ready line", rank, kind, payload, err)
		}
	}
	s.in.Close() // the SSH session ended
	_, _, exits := s.collect(3)
	for r, e := range exits {
		if e.Signal != "KILL" {
			t.Errorf("rank %d: %+v, want killed", r, e)
		}
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("Supervise: %v, want nil after its input closed", err)
		}
		s.done <- err // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("Supervise did not return")
	}
	waitNoProcesses(t, "sleep "+marker)
}

func TestSuperviseRejectsBadInput(t *testing.T) {
	tests := []struct {
		name  string
		write func(s *supervised)
		want  string
	}{
		{"unknown request", func(s *supervised) { _ = s.fw.write('Z', 4, nil) }, `unknown request 'Z' for rank 4`},
		{"rank started twice", func(s *supervised) {
			s.start(2, startRequest{Argv: []string{"sleep", "30"}})
			s.start(2, startRequest{Argv: []string{"sleep", "30"}})
		}, "started rank 2 twice"},
		{"oversized frame", func(s *supervised) {
			var hdr [frameHeader]byte
			hdr[0] = frameStart
			binary.BigEndian.PutUint32(hdr[5:], maxFramePayload+1)
			_, _ = s.in.Write(hdr[:])
		}, "not a hetsync supervisor stream"},
		{"cut frame", func(s *supervised) {
			_, _ = s.in.Write([]byte{frameStart, 0, 0})
			s.in.Close()
		}, "cut inside a frame header"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := startSupervised(t)
			go func() { _, _ = io.Copy(io.Discard, s.fr.r) }()
			tc.write(s)
			select {
			case err := <-s.done:
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("Supervise: %v, want an error containing %q", err, tc.want)
				}
				s.done <- err
			case <-time.After(30 * time.Second):
				t.Fatal("Supervise did not return")
			}
		})
	}
}

func TestSuperviseStopsRanksWhenSignalled(t *testing.T) {
	marker := strconv.Itoa(1_000_000 + rand.IntN(1_000_000))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := startSupervisedCtx(t, ctx)
	s.start(0, startRequest{Argv: []string{"sh", "-c", `echo ready; exec sleep ` + marker}})
	if kind, _, payload, err := s.fr.read(); err != nil || kind != frameStdout {
		t.Fatalf("frame %q %q, %v; want the ready line", kind, payload, err)
	}
	cancel() // as SIGTERM to `hetsync _supervise`
	if _, _, exits := s.collect(1); exits[0] != (exitNotice{Code: -1, Signal: "TERM"}) {
		t.Errorf("rank 0: %+v, want stopped by SIGTERM", exits[0])
	}
	select {
	case err := <-s.done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Supervise: %v, want the cancellation", err)
		}
		s.done <- err
	case <-time.After(30 * time.Second):
		t.Fatal("Supervise did not return")
	}
	waitNoProcesses(t, "sleep "+marker)
}
