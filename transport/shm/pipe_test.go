//go:build linux

package shm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The child side of TestPeerDeath: open the segment named in the environment, write the
// requested bytes and exit without closing anything, like a crashed process.
func TestMain(m *testing.M) {
	if name := os.Getenv("HETSYNC_SHM_CHILD"); name != "" {
		os.Exit(child(name))
	}
	if mode := os.Getenv(singleCopyChildEnv); mode != "" {
		os.Exit(singleCopyChild(mode))
	}
	if dir := os.Getenv(sweepChildEnv); dir != "" {
		os.Exit(sweepChild(dir))
	}
	if mode := os.Getenv(arenaChildEnv); mode != "" {
		os.Exit(arenaChild(mode))
	}
	os.Exit(m.Run())
}

func child(name string) int {
	n, _ := strconv.Atoi(os.Getenv("HETSYNC_SHM_CHILD_BYTES"))
	link, err := net.FileConn(os.NewFile(3, "link"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 3
	}
	seg, err := Open(name, Options{Dir: os.Getenv("HETSYNC_SHM_CHILD_DIR"), Peer: "parent"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 3
	}
	p, err := seg.Pipe(link)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 3
	}
	if _, err := p.Write(pattern(0, n)); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 3
	}
	// Wait until the parent has read it all (it tells us over stdin closing), then die.
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// pattern returns n bytes of a deterministic stream starting at offset off.
func pattern(off, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		x := uint32(off + i)
		b[i] = byte(x*2654435761>>24) ^ byte(x)
	}
	return b
}

// socketPair returns two connected Unix sockets, the links of the two ends of a pipe.
func socketPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) net.Conn {
		f := os.NewFile(uintptr(fd), "link")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return conn(fds[0]), conn(fds[1])
}

// newPair returns both ends of a pipe in this process; the segment file is already unlinked.
func newPair(t testing.TB, opts Options) (*Pipe, *Pipe) {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	opts.Peer = "B"
	seg, err := Create(opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.Peer = "A"
	seg2, err := Open(seg.Name(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := seg2.Unlink(); err != nil {
		t.Fatal(err)
	}
	if err := seg.Unlink(); err != nil { // already gone: not an error
		t.Fatal(err)
	}
	if _, err := os.Stat(seg.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("segment file still there after Unlink: %v", err)
	}
	la, lb := socketPair(t)
	a, err := seg.Pipe(la)
	if err != nil {
		t.Fatal(err)
	}
	b, err := seg2.Pipe(lb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestStreamWrapAround sends a long stream through a small ring in writes of varied sizes,
// smaller and larger than the ring, and reads it with buffers of other varied sizes, in both
// directions at once: positions wrap many times, reads are partial.
func TestStreamWrapAround(t *testing.T) {
	a, b := newPair(t, Options{RingSize: MinRingSize})
	const total = 3<<20 + 12345
	run := func(w, r *Pipe, seed uint64) error {
		errc := make(chan error, 1)
		go func() {
			rng := rand.New(rand.NewPCG(seed, 1))
			for off := 0; off < total; {
				n := min(total-off, 1+rng.IntN(3*MinRingSize/2))
				if k, err := w.Write(pattern(off, n)); err != nil || k != n {
					errc <- fmt.Errorf("write at %d: %d of %d bytes: %v", off, k, n, err)
					return
				}
				off += n
			}
			errc <- nil
		}()
		rng := rand.New(rand.NewPCG(seed, 2))
		got := make([]byte, 0, total)
		buf := make([]byte, 2*MinRingSize)
		for len(got) < total {
			n, err := r.Read(buf[:1+rng.IntN(len(buf)-1)])
			if err != nil {
				return fmt.Errorf("read at %d: %v", len(got), err)
			}
			got = append(got, buf[:n]...)
		}
		if err := <-errc; err != nil {
			return err
		}
		if !bytes.Equal(got, pattern(0, total)) {
			return errors.New("the stream arrived corrupted")
		}
		return nil
	}
	errc := make(chan error, 1)
	go func() { errc <- run(b, a, 7) }()
	if err := run(a, b, 3); err != nil {
		t.Fatal("a->b:", err)
	}
	if err := <-errc; err != nil {
		t.Fatal("b->a:", err)
	}
}

// TestLargeWrite: one Write of many times the ring, read with one ReadFull.
func TestLargeWrite(t *testing.T) {
	a, b := newPair(t, Options{RingSize: MinRingSize})
	want := pattern(5, 40*MinRingSize+7)
	errc := make(chan error, 1)
	go func() {
		n, err := a.Write(want)
		if err == nil && n != len(want) {
			err = fmt.Errorf("wrote %d of %d", n, len(want))
		}
		errc <- err
	}()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(b, got); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("large write arrived corrupted")
	}
}

func TestPartialRead(t *testing.T) {
	a, b := newPair(t, Options{})
	want := pattern(0, 100)
	if n, err := a.Write(want); n != 100 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	var got []byte
	buf := make([]byte, 30)
	for len(got) < 100 {
		n, err := b.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		if n > len(buf) || n == 0 {
			t.Fatalf("Read returned %d into a %d-byte buffer", n, len(buf))
		}
		got = append(got, buf[:n]...)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got %x, want %x", got, want)
	}
	if n, err := b.Read(nil); n != 0 || err != nil {
		t.Fatalf("empty Read = %d, %v", n, err)
	}
	a.Write(want[:77])
	if n := b.Buffered(); n != 77 {
		t.Fatalf("Buffered = %d after a 77-byte write", n)
	}
	b.Read(buf)
	if n := b.Buffered(); n != 47 {
		t.Fatalf("Buffered = %d after reading 30 of 77 bytes", n)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) && errors.As(err, &ne) && ne.Timeout()
}

// TestReadDeadline: a deadline that passes ends a blocked Read; one moved into the past from
// another goroutine interrupts it (how the stream endpoint cancels a read); clearing it makes
// the pipe usable again, with nothing lost.
func TestReadDeadline(t *testing.T) {
	a, b := newPair(t, Options{})
	if err := b.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Read(make([]byte, 10)); n != 0 || !isTimeout(err) {
		t.Fatalf("Read past its deadline = %d, %v; want a timeout", n, err)
	}
	b.SetReadDeadline(time.Time{})
	errc := make(chan error, 1)
	go func() {
		_, err := b.Read(make([]byte, 10))
		errc <- err
	}()
	if err := b.SetReadDeadline(time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !isTimeout(err) {
		t.Fatalf("interrupted Read returned %v; want a timeout", err)
	}
	if err := b.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	a.Write([]byte("after"))
	got := make([]byte, 5)
	if _, err := io.ReadFull(b, got); err != nil || string(got) != "after" {
		t.Fatalf("read after clearing the deadline: %q, %v", got, err)
	}
}

// TestWriteDeadline: a Write into a full ring stops at its deadline and reports what went in;
// the reader gets exactly that.
func TestWriteDeadline(t *testing.T) {
	a, b := newPair(t, Options{RingSize: MinRingSize})
	want := pattern(0, 3*MinRingSize)
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := a.Write(want)
		done <- result{n, err}
	}()
	// The deadline is set once the ring is full, so what went in does not depend on how fast
	// the writer got there.
	for b.Buffered() < MinRingSize {
		runtime.Gosched()
	}
	a.SetWriteDeadline(time.Now().Add(20 * time.Millisecond))
	r := <-done
	n := r.n
	if !isTimeout(r.err) || n != MinRingSize {
		t.Fatalf("Write into a full ring = %d, %v; want %d and a timeout", n, r.err, MinRingSize)
	}
	a.SetWriteDeadline(time.Time{})
	errc := make(chan error, 1)
	go func() {
		_, err := a.Write(want[n:])
		errc <- err
	}()
	if err := a.SetWriteDeadline(time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !isTimeout(err) {
		t.Fatalf("interrupted Write returned %v; want a timeout", err)
	}
	got := make([]byte, n)
	if _, err := io.ReadFull(b, got); err != nil || !bytes.Equal(got, want[:n]) {
		t.Fatalf("reader got %d bytes (%v), not the %d written", len(got), err, n)
	}
}

// TestCloseEitherSide: after one end closes, the other reads what was written, then io.EOF,
// and its writes fail; a call blocked on the closing end returns net.ErrClosed.
func TestCloseEitherSide(t *testing.T) {
	for _, closer := range []string{"creator", "opener"} {
		t.Run(closer, func(t *testing.T) {
			a, b := newPair(t, Options{RingSize: MinRingSize})
			if closer == "opener" {
				a, b = b, a
			}
			blocked := make(chan error, 1)
			go func() {
				_, err := a.Read(make([]byte, 1))
				blocked <- err
			}()
			a.Write([]byte("last words"))
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if err := <-blocked; !errors.Is(err, net.ErrClosed) {
				t.Fatalf("Read blocked on the closing end returned %v; want net.ErrClosed", err)
			}
			if _, err := a.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("Write after Close returned %v; want net.ErrClosed", err)
			}
			got, err := io.ReadAll(b)
			if err != nil || string(got) != "last words" {
				t.Fatalf("peer read %q, %v; want the last words then EOF", got, err)
			}
			if _, err := b.Write(make([]byte, 2*MinRingSize)); !errors.Is(err, syscall.EPIPE) {
				t.Fatalf("Write to a closed peer returned %v; want EPIPE", err)
			}
			if err := a.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
		})
	}
}

// TestCloseUnblocksWriter: Close from another goroutine ends a Write blocked on a full ring.
func TestCloseUnblocksWriter(t *testing.T) {
	a, _ := newPair(t, Options{RingSize: MinRingSize})
	errc := make(chan error, 1)
	go func() {
		_, err := a.Write(make([]byte, 4*MinRingSize))
		errc <- err
	}()
	a.Close()
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write blocked during Close returned %v; want net.ErrClosed", err)
	}
}

func TestCloseWrite(t *testing.T) {
	a, b := newPair(t, Options{})
	a.Write([]byte("half"))
	if err := a.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write([]byte("x")); err == nil {
		t.Fatal("Write after CloseWrite succeeded")
	}
	got, err := io.ReadAll(b)
	if err != nil || string(got) != "half" {
		t.Fatalf("read %q, %v after CloseWrite", got, err)
	}
	// The other direction still works.
	b.Write([]byte("reply"))
	buf := make([]byte, 5)
	if _, err := io.ReadFull(a, buf); err != nil || string(buf) != "reply" {
		t.Fatalf("reverse direction after CloseWrite: %q, %v", buf, err)
	}
}

// TestPeerDeath runs the other end in a child process that writes part of a message and then
// exits without closing: the parent reads what was written, then gets an error naming the
// peer, and a writer blocked on the full ring is released with the same error.
func TestPeerDeath(t *testing.T) {
	dir := t.TempDir()
	seg, err := Create(Options{Dir: dir, RingSize: MinRingSize, Peer: "rank 7"})
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	mine, theirs := socketPair(t)
	theirsFile, err := theirs.(*net.UnixConn).File()
	if err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	const sent = 1000
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "HETSYNC_SHM_CHILD="+seg.Name(), "HETSYNC_SHM_CHILD_DIR="+dir,
		"HETSYNC_SHM_CHILD_BYTES="+strconv.Itoa(sent))
	cmd.ExtraFiles = []*os.File{theirsFile}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirsFile.Close()
	p, err := seg.Pipe(mine)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	got := make([]byte, sent)
	if _, err := io.ReadFull(p, got); err != nil {
		t.Fatalf("reading what the child wrote: %v (child: %s)", err, stderr.String())
	}
	if !bytes.Equal(got, pattern(0, sent)) {
		t.Fatal("the child's bytes arrived corrupted")
	}
	if _, err := os.Stat(filepath.Join(dir, seg.Name())); err != nil {
		t.Fatalf("segment file: %v", err)
	}
	seg.Unlink()
	// Fill the ring towards the child, which never reads, so that a Write blocks.
	werr := make(chan error, 1)
	go func() {
		_, err := p.Write(make([]byte, 2*MinRingSize))
		werr <- err
	}()
	stdin.Close() // the child exits without closing its pipe
	cmd.Wait()
	if stderr.Len() > 0 {
		t.Fatalf("child: %s", stderr.String())
	}
	_, rerr := p.Read(make([]byte, 10))
	for _, err := range []error{rerr, <-werr} {
		if !errors.Is(err, ErrPeerGone) || !bytes.Contains([]byte(err.Error()), []byte("rank 7")) {
			t.Fatalf("after the peer died: %v; want ErrPeerGone naming rank 7", err)
		}
	}
}

func TestOpenRejects(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"", "../etc/passwd", "hetsync-shm-", "hetsync-shm-0123456789abcdef0123456789ABCDEF",
		"hetsync-shm-0123456789abcdef0123456789abcdef/x", "hetsync-shm-0123456789abcdef0123456789abcdex"} {
		if _, err := Open(name, Options{Dir: dir, Peer: "rank 2"}); err == nil || !bytes.Contains([]byte(err.Error()), []byte("rank 2")) {
			t.Errorf("Open(%q) = %v; want an error naming rank 2", name, err)
		}
	}
	missing := namePrefix + "0123456789abcdef0123456789abcdef"
	if _, err := Open(missing, Options{Dir: dir}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open of a missing segment = %v; want not-exist", err)
	}
	// A file with the right name but a wrong header.
	if err := os.WriteFile(filepath.Join(dir, missing), make([]byte, dataOff+2*MinRingSize), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(missing, Options{Dir: dir}); err == nil {
		t.Error("Open of a segment with a zero header succeeded")
	}
	// Too small.
	if err := os.WriteFile(filepath.Join(dir, missing), []byte("HSYNSHM1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(missing, Options{Dir: dir}); err == nil {
		t.Error("Open of a truncated segment succeeded")
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{{RingSize: 1000}, {RingSize: MinRingSize / 2}, {RingSize: 2 * MaxRingSize}, {Spin: 1 << 21}, {Yields: 1 << 11}} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: no error", o)
		}
		if _, err := Create(o); err == nil {
			t.Errorf("Create(%+v) succeeded", o)
		}
	}
	if err := (Options{}).Validate(); err != nil {
		t.Error(err)
	}
}

// TestSegmentCloseRemovesFile: a segment that never became a pipe leaves nothing behind.
func TestSegmentCloseRemovesFile(t *testing.T) {
	dir := t.TempDir()
	seg, err := Create(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := seg.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("%d files left in %s", len(ents), dir)
	}
	if _, err := seg.Pipe(nopLink{}); err == nil {
		t.Fatal("Pipe on a closed segment succeeded")
	}
}

type nopLink struct{}

func (nopLink) Read([]byte) (int, error)    { return 0, io.EOF }
func (nopLink) Write(b []byte) (int, error) { return len(b), nil }
func (nopLink) Close() error                { return nil }
