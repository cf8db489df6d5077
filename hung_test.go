package hetsync_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hungPeerTimeout is the peer timeout the hung-peer tests give their jobs, and hungBound the
// time within which every survivor must have named the frozen or killed rank: the timeout,
// one heartbeat interval, and room for a loaded host to schedule the ranks.
const (
	hungPeerTimeout = 2 * time.Second
	hungBound       = hungPeerTimeout + 4*time.Second
)

// hungBench is a bench job long enough to be stopped in the middle: many sizes, many
// iterations, rows printed as each size ends.
var hungBench = []string{"bench", "-b", "4K", "-e", "16M", "-f", "2", "-n", "400", "-w", "1", "-c", "0",
	"--security", "none", "--data-path", "tcp", "--peer-timeout", hungPeerTimeout.String(), "--stall", "1s"}

// procOutput is a process's standard output and error, in a file that the test reads while
// the process writes it.
type procOutput struct{ f *os.File }

func newProcOutput(t *testing.T) procOutput {
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return procOutput{f}
}

func (o procOutput) String() string {
	b, _ := os.ReadFile(o.f.Name())
	return string(b)
}

// waitFor waits until cond holds, or fails the test after d, showing out.
func waitFor(t *testing.T, d time.Duration, what string, out procOutput, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s; output:\n%s", d, what, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// benchRowSeen says whether a bench output has its first measured row (the job is in its
// collectives).
func benchRowSeen(out string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(strings.TrimPrefix(line, "[0] "))
		if len(f) > 5 && f[0] == "4096" {
			return true
		}
	}
	return false
}

// namesRank says whether a survivor's output blames rank r for the failure: frozen (its
// heartbeats stopped) or dead (its connections ended).
func namesRank(out string, r int, sig syscall.Signal) bool {
	if sig == syscall.SIGSTOP {
		return strings.Contains(out, fmt.Sprintf("rank %d is unresponsive", r))
	}
	// The data connection to a killed rank ends: the receive from it, or a send to it that
	// the reset reaches first, fails naming it (a *transport.PeerError, "recv with rank R: ...",
	// "send ... with rank R: ..."), and under a launcher, the launcher names the rank it saw
	// killed.
	return strings.Contains(out, fmt.Sprintf(" with rank %d: ", r)) ||
		strings.Contains(out, fmt.Sprintf("rank %d failed first: killed by signal", r))
}

// A rank frozen (SIGSTOP) or killed (SIGKILL) in the middle of a job's collectives, with the
// ranks started by hand as another launcher would (no supervisor): every survivor exits
// non-zero naming it within the bound.
func TestHungPeerAdopted(t *testing.T) {
	hetsyncBin, _ := binaries(t)
	for _, tc := range []struct {
		p, victim int
		sig       syscall.Signal
	}{{3, 1, syscall.SIGSTOP}, {4, 2, syscall.SIGKILL}, {4, 3, syscall.SIGSTOP}} {
		t.Run(fmt.Sprintf("p%d-%v", tc.p, tc.sig), func(t *testing.T) {
			port := freePort(t)
			secret := hex.EncodeToString([]byte("hung-peer-test-secret-" + port + "-0123456789abcdef"))
			cmds := make([]*exec.Cmd, tc.p)
			outs := make([]procOutput, tc.p)
			exited := make([]chan time.Time, tc.p)
			for r := range cmds {
				cmd := exec.Command(hetsyncBin, hungBench...)
				cmd.Env = append(cleanEnv(), "HETSYNC_RANK="+strconv.Itoa(r), "HETSYNC_WORLD_SIZE="+strconv.Itoa(tc.p),
					"HETSYNC_RENDEZVOUS=127.0.0.1:"+port, "HETSYNC_JOB_SECRET="+secret,
					"HETSYNC_LOCAL_RANK="+strconv.Itoa(r), "HETSYNC_LOCAL_SIZE="+strconv.Itoa(tc.p))
				outs[r] = newProcOutput(t)
				cmd.Stdout, cmd.Stderr = outs[r].f, outs[r].f
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				cmds[r], exited[r] = cmd, make(chan time.Time, 1)
				go func() {
					_ = cmd.Wait()
					exited[r] <- time.Now()
				}()
			}
			t.Cleanup(func() {
				for _, c := range cmds {
					_ = c.Process.Signal(syscall.SIGCONT)
					_ = c.Process.Kill()
				}
			})
			waitFor(t, 90*time.Second, "rank 0's first bench row", outs[0], func() bool {
				return benchRowSeen(outs[0].String()) || len(exited[0]) > 0
			})
			if err := cmds[tc.victim].Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			signalled := time.Now()
			for r := range cmds {
				if r == tc.victim {
					continue
				}
				select {
				case at := <-exited[r]:
					out := outs[r].String()
					if took := at.Sub(signalled); took > hungBound {
						t.Errorf("rank %d exited %v after rank %d got %v, bound %v", r, took, tc.victim, tc.sig, hungBound)
					}
					t.Logf("rank %d exited %v after the signal, code %d:\n%s", r, at.Sub(signalled), cmds[r].ProcessState.ExitCode(), lastLines(out, 4))
					if cmds[r].ProcessState.ExitCode() == 0 || !namesRank(out, tc.victim, tc.sig) {
						t.Errorf("rank %d: exit %d, output does not name rank %d:\n%s", r, cmds[r].ProcessState.ExitCode(), tc.victim, out)
					}
				case <-time.After(hungBound + 30*time.Second):
					t.Fatalf("rank %d still running %v after rank %d got %v:\n%s", r, time.Since(signalled), tc.victim, tc.sig, outs[r].String())
				}
			}
		})
	}
}

// rankPid is the process of rank r of the job whose processes carry marker in their
// environment.
func rankPid(marker string, r int) int {
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range procs {
		env, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		vars := strings.Split(string(env), "\x00")
		hasMarker, hasRank := false, false
		for _, v := range vars {
			hasMarker = hasMarker || v == marker
			hasRank = hasRank || v == "HETSYNC_RANK="+strconv.Itoa(r)
		}
		if hasMarker && hasRank {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			return pid
		}
	}
	return 0
}

// The same under `hetsync launch`: the launcher exits non-zero naming the frozen or killed
// rank within the bound.
func TestHungPeerUnderLaunch(t *testing.T) {
	hetsyncBin, _ := binaries(t)
	for _, tc := range []struct {
		p, victim int
		sig       syscall.Signal
	}{{3, 2, syscall.SIGSTOP}, {4, 1, syscall.SIGKILL}} {
		t.Run(fmt.Sprintf("p%d-%v", tc.p, tc.sig), func(t *testing.T) {
			marker := fmt.Sprintf("HETSYNC_TEST_MARKER=%s-%d", t.Name(), time.Now().UnixNano())
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			argv := append([]string{"launch", "-np", strconv.Itoa(tc.p), "--grace", "1s", "--", hetsyncBin}, hungBench...)
			cmd := exec.CommandContext(ctx, hetsyncBin, argv...)
			cmd.Env = append(cleanEnv(), marker)
			out := newProcOutput(t)
			cmd.Stdout, cmd.Stderr = out.f, out.f
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan time.Time, 1)
			go func() {
				_ = cmd.Wait()
				exited <- time.Now()
			}()
			waitFor(t, 90*time.Second, "rank 0's first bench row", out, func() bool { return benchRowSeen(out.String()) || len(exited) > 0 })
			pid := rankPid(marker, tc.victim)
			if pid == 0 {
				t.Fatalf("no process of rank %d found", tc.victim)
			}
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
			if err := syscall.Kill(pid, tc.sig); err != nil {
				t.Fatal(err)
			}
			signalled := time.Now()
			waitFor(t, hungBound, fmt.Sprintf("the job to name rank %d", tc.victim), out, func() bool { return namesRank(out.String(), tc.victim, tc.sig) })
			select {
			case at := <-exited:
				// The launcher stops the frozen rank too: SIGTERM and SIGCONT (SIGKILL after --grace).
				if took := at.Sub(signalled); took > hungBound+2*time.Second {
					t.Errorf("the launcher exited %v after rank %d got %v, bound %v and the grace", took, tc.victim, tc.sig, hungBound)
				}
				t.Logf("the launcher exited %v after the signal, code %d:\n%s", at.Sub(signalled), cmd.ProcessState.ExitCode(), lastLines(out.String(), 8))
				if cmd.ProcessState.ExitCode() == 0 {
					t.Errorf("the launcher exited 0:\n%s", out.String())
				}
			case <-time.After(hungBound + 30*time.Second):
				t.Fatalf("the launcher is still running %v after rank %d got %v:\n%s", time.Since(signalled), tc.victim, tc.sig, out.String())
			}
		})
	}
}

// lastLines is the last n lines of out.
func lastLines(out string, n int) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
