//go:build linux

package shm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// singleCopyChildEnv names the mode of a child process of the single-copy tests.
const singleCopyChildEnv = "HETSYNC_SHM_CMA_CHILD"

// TestSingleCopyOddSizes moves messages of odd sizes both ways at once through pipes whose
// single-copy threshold is every message (1), the default, a window of sizes, or off, reading with buffers of
// other odd sizes so that single-copy writes are taken in several pieces, and checks every
// byte and which path each end reports.
func TestSingleCopyOddSizes(t *testing.T) {
	sizes := []int{1, 7, 3, 4093, MinRingSize - 1, DefaultSingleCopyMin - 1, DefaultSingleCopyMin,
		DefaultSingleCopyMin + 1, 1000003, 3<<20 + 5}
	for _, tc := range []struct {
		name          string
		threshold, up int
		single        bool
	}{{"every-write", 1, 0, true}, {"default", 0, 0, true}, {"window", 4093, DefaultSingleCopyMin + 1, true}, {"off", -1, 0, false}} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newPair(t, Options{RingSize: MinRingSize, SingleCopyMin: tc.threshold, SingleCopyMax: tc.up})
			for _, p := range []*Pipe{a, b} {
				in, out, refused := p.SingleCopy()
				if in != tc.single || out != tc.single || (refused == nil) != tc.single {
					t.Fatalf("%s: SingleCopy() = %v, %v, %v; want %v both ways", p.Peer(), in, out, refused, tc.single)
				}
			}
			errc := make(chan error, 2)
			for dir, pair := range [][2]*Pipe{{a, b}, {b, a}} {
				w, r := pair[0], pair[1]
				go func() {
					off := 0
					for _, n := range sizes {
						if _, err := w.Write(pattern(off+dir, n)); err != nil {
							errc <- err
							return
						}
						off += n
					}
					errc <- nil
				}()
				go func() {
					total := 0
					for _, n := range sizes {
						total += n
					}
					got := make([]byte, total)
					for off, i := 0, 0; off < total; i++ {
						k, err := r.Read(got[off:min(total, off+[]int{1, 5003, 700001, 1 << 20}[i%4])])
						if err != nil {
							errc <- err
							return
						}
						off += k
					}
					if want := pattern(dir, total); !bytes.Equal(got, want) {
						errc <- fmt.Errorf("direction %d: the stream differs from byte %d", dir, firstDiff(got, want))
						return
					}
					errc <- nil
				}()
			}
			for range 4 {
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
			}
			if n := a.Buffered() + b.Buffered(); n != 0 {
				t.Fatalf("%d bytes still buffered after everything was read", n)
			}
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestSingleCopyWithdrawn gives up single-copy writes on their deadline, once before the
// reader took anything and once after it took part: Write returns exactly what the reader
// took, and the reader's stream goes on with the next write, without the withdrawn bytes and
// without any byte of the writer's buffer changed after the withdrawal.
func TestSingleCopyWithdrawn(t *testing.T) {
	a, b := newPair(t, Options{SingleCopyMin: 1})
	const size = 1 << 20
	for _, taken := range []int{0, 1000} {
		if taken > 0 {
			go func() {
				// Take part of the message once it is posted, then stop reading.
				for b.Buffered() == 0 {
					runtime.Gosched()
				}
				part := make([]byte, taken)
				if _, err := io.ReadFull(b, part); err != nil || !bytes.Equal(part, pattern(0, taken)) {
					panic(fmt.Sprintf("partial read: %v", err))
				}
			}()
		}
		a.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
		msg := pattern(0, size)
		n, err := a.Write(msg)
		if !errors.Is(err, os.ErrDeadlineExceeded) || n != taken {
			t.Fatalf("taken %d: Write = %d, %v; want %d and a deadline error", taken, n, err, taken)
		}
		clear(msg) // the reader must never see this
		a.SetWriteDeadline(time.Time{})
		// A single-copy Write returns once the reader took it: read meanwhile.
		next := pattern(7, 100)
		werr := make(chan error, 1)
		go func() {
			_, err := a.Write(next)
			werr <- err
		}()
		got := make([]byte, len(next))
		if _, err := io.ReadFull(b, got); err != nil || !bytes.Equal(got, next) {
			t.Fatalf("taken %d: after the withdrawal the reader got %v, %v; want the next write", taken, got[:8], err)
		}
		if err := <-werr; err != nil {
			t.Fatal(err)
		}
	}
}

// TestSingleCopyPeerDeathMidCopy kills (SIGKILL) a child process while this process is in the
// middle of reading its 64 MiB single-copy write: the bytes read before are right, and the next
// Read fails at once with ErrPeerGone naming the peer instead of hanging or returning bytes
// of a dead process.
func TestSingleCopyPeerDeathMidCopy(t *testing.T) {
	const size = 64 << 20
	p, cmd, stderr := startSingleCopyChild(t, "write", size, Options{Peer: "rank 5"})
	in, _, refused := p.SingleCopy()
	if !in {
		t.Fatalf("this process cannot read the child's memory: %v", refused)
	}
	got := make([]byte, 5<<20+3)
	if _, err := io.ReadFull(p, got); err != nil {
		t.Fatalf("reading the child's first bytes: %v (child: %s)", err, stderr)
	}
	if !bytes.Equal(got, pattern(0, len(got))) {
		t.Fatalf("the first bytes differ from byte %d", firstDiff(got, pattern(0, len(got))))
	}
	if st := stateStatus(p.in.remote.Load()); st != stPosted {
		t.Fatalf("the child's write is not in flight (state %d)", st)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The child's pid stays taken until it is reaped, so the read sees a dead process, not a
	// recycled pid; reaping before reading would test the pidfd instead. Both must fail.
	done := make(chan error, 1)
	go func() {
		var err error
		for err == nil {
			_, err = p.Read(got)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrPeerGone) || !strings.Contains(err.Error(), "rank 5") {
			t.Fatalf("Read after the writer was killed: %v; want ErrPeerGone naming rank 5", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Read hangs after the writer was killed")
	}
	cmd.Wait()
}

// TestSingleCopyRefused runs the other end in a child process whose seccomp filter refuses
// process_vm_readv, as a container's may: the child cannot read this process's memory, so
// this end's large writes go through the ring, while the child's large writes still reach
// this end with one copy; every byte arrives both ways.
func TestSingleCopyRefused(t *testing.T) {
	const size = 3<<20 + 1
	p, cmd, stderr := startSingleCopyChild(t, "echo-refused", size, Options{Peer: "rank 2"})
	// The child decides before its pipe exists, so its verdict is in the segment by now.
	in, out, _ := p.SingleCopy()
	if !in || out {
		t.Fatalf("SingleCopy() = %v, %v; want true (this end reads the child) and false (the child is refused)", in, out)
	}
	if _, err := p.Write(pattern(0, size)); err != nil {
		t.Fatalf("writing to the refused child: %v (child: %s)", err, stderr)
	}
	got := make([]byte, size)
	if _, err := io.ReadFull(p, got); err != nil {
		t.Fatalf("reading the child's echo: %v (child: %s)", err, stderr)
	}
	if !bytes.Equal(got, pattern(1, size)) {
		t.Fatalf("the echo differs from byte %d", firstDiff(got, pattern(1, size)))
	}
	p.Close() // the child waits for this end to go
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v: %s", err, stderr)
	}
	if !strings.Contains(stderr.String(), "refused: ") || !strings.Contains(stderr.String(), "operation not permitted") {
		t.Fatalf("the child did not report the refusal: %q", stderr.String())
	}
}

// startSingleCopyChild creates a segment, starts this test binary as the other end in mode
// with size bytes to move, and returns this end's pipe.
func startSingleCopyChild(t *testing.T, mode string, size int, opts Options) (*Pipe, *exec.Cmd, *bytes.Buffer) {
	t.Helper()
	opts.Dir = t.TempDir()
	seg, err := Create(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { seg.Close() })
	mine, theirs := socketPair(t)
	theirsFile, err := theirs.(*net.UnixConn).File()
	if err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), singleCopyChildEnv+"="+mode, "HETSYNC_SHM_CHILD_DIR="+opts.Dir,
		"HETSYNC_SHM_CHILD_BYTES="+strconv.Itoa(size), "HETSYNC_SHM_CHILD_SEGMENT="+seg.Name())
	cmd.ExtraFiles = []*os.File{theirsFile}
	stderr := new(bytes.Buffer)
	cmd.Stderr = stderr
	// The child says "ready" once its pipe exists (and its verdict is in the segment).
	ready, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	theirsFile.Close()
	line := make([]byte, 6)
	started := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
	if _, err := io.ReadFull(ready, line); err != nil {
		cmd.Wait()
		t.Fatalf("child did not start: %v: %s", err, stderr)
	}
	started.Stop()
	seg.Unlink()
	p, err := seg.Pipe(mine)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, cmd, stderr
}

// singleCopyChild is the other end of the single-copy tests: "write" writes its bytes (and is
// killed by the parent meanwhile); "echo-refused" first makes process_vm_readv fail for this
// process, then reads its bytes and writes another stream of as many back.
func singleCopyChild(mode string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 3
	}
	n, _ := strconv.Atoi(os.Getenv("HETSYNC_SHM_CHILD_BYTES"))
	link, err := net.FileConn(os.NewFile(3, "link"))
	if err != nil {
		return fail(err)
	}
	if mode == "echo-refused" {
		if err := denyProcessVMReadv(); err != nil {
			return fail(err)
		}
	}
	seg, err := Open(os.Getenv("HETSYNC_SHM_CHILD_SEGMENT"), Options{Dir: os.Getenv("HETSYNC_SHM_CHILD_DIR"), Peer: "parent"})
	if err != nil {
		return fail(err)
	}
	p, err := seg.Pipe(link)
	if err != nil {
		return fail(err)
	}
	if in, _, refused := p.SingleCopy(); !in {
		fmt.Fprintln(os.Stderr, "refused:", refused)
	}
	os.Stdout.WriteString("ready\n")
	switch mode {
	case "write":
		// The parent's verdict arrives once its pipe exists.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
			if _, out, _ := p.SingleCopy(); out {
				break
			}
			if time.Now().After(deadline) {
				return fail(errors.New("the parent never said it can read this process's memory"))
			}
		}
		if _, err := p.Write(pattern(0, n)); err != nil {
			return fail(err)
		}
		select {} // the parent kills this process
	case "echo-refused":
		got := make([]byte, n)
		if _, err := io.ReadFull(p, got); err != nil {
			return fail(err)
		}
		if !bytes.Equal(got, pattern(0, n)) {
			return fail(fmt.Errorf("the parent's stream differs from byte %d", firstDiff(got, pattern(0, n))))
		}
		if _, err := p.Write(pattern(1, n)); err != nil {
			return fail(err)
		}
		// Stay until the parent has read the echo (it closes its end).
		p.Read(make([]byte, 1))
		return 0
	}
	return fail(fmt.Errorf("unknown mode %q", mode))
}

// denyProcessVMReadv installs a seccomp filter on every thread of this process that fails
// process_vm_readv with EPERM, as container runtimes' default profiles may.
func denyProcessVMReadv() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	filter := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // seccomp_data.nr
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: unix.SYS_PROCESS_VM_READV},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&prog))); e != 0 {
		return fmt.Errorf("seccomp: %w", e)
	}
	return nil
}

// BenchmarkSingleCopy streams messages of each size from one end of a pipe to the other, through
// the ring and with a single copy, the reader taking each message whole into its own buffer
// and then reading it once (as a reduction does). Go reports MB/s of messages; cpu-ns/op is
// the CPU time the process spent per message, which other tenants of a shared machine disturb
// less than the wall time.
func BenchmarkSingleCopy(b *testing.B) {
	for _, size := range []int{16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20} {
		for _, path := range []struct {
			name string
			min  int
		}{{"ring", -1}, {"single", 1}} {
			b.Run(fmt.Sprintf("%s/%dKiB", path.name, size>>10), func(b *testing.B) {
				w, r := newPair(b, Options{SingleCopyMin: path.min})
				msg := pattern(0, size)
				got := make([]byte, size)
				b.SetBytes(int64(size))
				done := make(chan error, 1)
				go func() {
					for range b.N {
						if _, err := w.Write(msg); err != nil {
							done <- err
							return
						}
					}
					done <- nil
				}()
				var sum byte
				cpu0 := cpuTime()
				for range b.N {
					if _, err := io.ReadFull(r, got); err != nil {
						b.Fatal(err)
					}
					for _, c := range got {
						sum += c
					}
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
				_ = sum
			})
		}
	}
}

// cpuTime is the user and system time this process has used, in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkCopyKernel compares the two ways bytes move between ranks of a host: memmove (what
// the rings do, twice) and process_vm_readv (what the single copy does, once), each from one
// buffer of this process into another. Go reports MB/s.
func BenchmarkCopyKernel(b *testing.B) {
	for _, size := range []int{64 << 10, 256 << 10, 1 << 20, 4 << 20, 64 << 20} {
		src, dst := pattern(0, size), make([]byte, size)
		b.Run(fmt.Sprintf("memmove/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for range b.N {
				copy(dst, src)
			}
		})
		b.Run(fmt.Sprintf("process_vm_readv/%dKiB", size>>10), func(b *testing.B) {
			m := peerMem{pid: os.Getpid(), pidfd: -1}
			b.SetBytes(int64(size))
			for range b.N {
				if _, err := m.read(dst, uint64(uintptr(unsafe.Pointer(&src[0])))); err != nil {
					b.Fatal(err)
				}
			}
			runtime.KeepAlive(src)
		})
	}
}
