//go:build linux

package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Arena is memory that every rank of a one-host job maps from one file (see Arena in the
// package documentation). It satisfies transport.Arena.
type Arena struct {
	rank, ranks int
	path        string
	mem         []byte // the whole mapping: header, then data
	data        []byte
	spin        bool
	poll        time.Duration
	gone        func() error

	mu       sync.Mutex
	lock     int // the creator's locked descriptor until Unlink; -1: none
	unlinked bool

	// pidfds are the other ranks' processes, opened by Watch; -1 for a rank this one cannot
	// watch (itself, another pid namespace, a rank in this very process). pfds is the poll
	// set over the valid ones, pfdRank their ranks. Written once by Watch, before any Wait
	// can use them (watched).
	pidfds  []int
	pfds    []unix.PollFd
	pfdRank []int
	watched atomic.Bool
	pollMu  sync.Mutex // pfds' revents are written by the poll

	closed  atomic.Bool
	waiting atomic.Int32 // Waits inside the mapping, which Close lets leave first
}

// Layout of an arena file (see the package documentation).
const (
	arenaMagic     = "HSYNARN1"
	arenaVersion   = 1
	arenaPrefix    = "hetsync-arena-"
	arenaSlotsOff  = 64
	arenaSlotSize  = 64
	arenaSlotPID   = 0  // uint32, the rank's pid in its pid namespace
	arenaSlotNS    = 8  // uint64, the inode of that pid namespace
	arenaSlotState = 16 // uint32, arenaMapped or arenaClosed

	arenaMapped = 1
	arenaClosed = 2

	// arenaSleep bounds one futex sleep. The sleep is a raw system call, so the rank's
	// runtime does not know its thread is asleep and runs none of the rank's other goroutines
	// (heartbeats, readers) until it returns: short enough that they keep their pace, long
	// enough that a waiting rank costs its host little.
	arenaSleep = 2 * time.Millisecond
	// Futex operations without FUTEX_PRIVATE_FLAG: the ranks are different processes.
	futexWait = 0
	futexWake = 1

	// arenaSpin is how many times Wait polls its word before it sleeps, when it spins.
	arenaSpin = 200
)

func arenaDataOff(ranks int) int {
	return (arenaSlotsOff + ranks*arenaSlotSize + 4095) &^ 4095
}

func (o ArenaOptions) check(what string) (ArenaOptions, error) {
	if o.Ranks < 1 || o.Ranks > MaxArenaRanks {
		return o, fmt.Errorf("shm arena (%s): %d ranks, want 1 to %d", what, o.Ranks, MaxArenaRanks)
	}
	if o.Rank < 0 || o.Rank >= o.Ranks {
		return o, fmt.Errorf("shm arena (%s): rank %d out of range [0, %d)", what, o.Rank, o.Ranks)
	}
	if o.Dir == "" {
		o.Dir = DefaultDir
	}
	return o, nil
}

// CreateArena makes an arena file of size data bytes (rounded up to a page) in opts.Dir for
// a job of opts.Ranks ranks and maps it. Its pages are taken from the tmpfs only when touched;
// a directory without room for all of them is an error. The caller hands Name() to the other ranks, which OpenArena it, then Unlinks it.
func CreateArena(size int, opts ArenaOptions) (*Arena, error) {
	opts, err := opts.check("create")
	if err != nil {
		return nil, err
	}
	if size < 1 || size > MaxArenaBytes {
		return nil, fmt.Errorf("shm arena: rank %d: size %d bytes, want 1 to %d", opts.Rank, size, MaxArenaBytes)
	}
	size = (size + 4095) &^ 4095
	path, fd, err := createLocked(opts.Dir, arenaPrefix) // locked until Unlink
	if err != nil {
		return nil, fmt.Errorf("shm arena: rank %d: %w", opts.Rank, err)
	}
	dataOff := arenaDataOff(opts.Ranks)
	total := dataOff + size
	fail := func(err error) (*Arena, error) {
		os.Remove(path)
		syscall.Close(fd)
		return nil, fmt.Errorf("shm arena: rank %d: %s: %w", opts.Rank, path, err)
	}
	// Sparse: a page costs memory only once a rank touches it. A tmpfs that could not hold the
	// whole arena now is refused here, so that a first touch does not meet a full one (SIGBUS)
	// in the common case; another tenant filling it later still could.
	if free, err := FreeBytes(opts.Dir); err == nil && free < int64(total) {
		return fail(newFullError(opts.Dir, int64(total)))
	}
	if err := syscall.Ftruncate(fd, int64(total)); err != nil {
		return fail(fmt.Errorf("sizing to %d bytes: %w", total, err))
	}
	mem, err := syscall.Mmap(fd, 0, total, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("mapping: %w", err))
	}
	copy(mem, arenaMagic)
	binary.LittleEndian.PutUint32(mem[8:], arenaVersion)
	binary.LittleEndian.PutUint32(mem[12:], uint32(opts.Ranks))
	binary.LittleEndian.PutUint64(mem[16:], uint64(size))
	a := newArena(opts, path, mem, dataOff)
	a.lock = fd
	return a, nil
}

// FreeBytes is how many bytes the file system of dir ("" for DefaultDir) has free for this
// user: what an arena created there may take.
func FreeBytes(dir string) (int64, error) {
	if dir == "" {
		dir = DefaultDir
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return 0, fmt.Errorf("shm: free space of %s: %w", dir, err)
	}
	return int64(fs.Bavail) * int64(fs.Bsize), nil
}

// newFullError is the FullError of dir for want bytes, with the file system's room as statfs
// tells it now.
func newFullError(dir string, want int64) *FullError {
	e := &FullError{Dir: dir, Want: want, Free: -1, Size: -1}
	var fs syscall.Statfs_t
	if syscall.Statfs(dir, &fs) == nil {
		e.Free, e.Size = int64(fs.Bavail)*int64(fs.Bsize), int64(fs.Blocks)*int64(fs.Bsize)
	}
	return e
}

// OpenArena maps the arena another rank created under name in opts.Dir. The file must be a
// regular file of this process's user with a valid header for opts.Ranks ranks.
func OpenArena(name string, opts ArenaOptions) (*Arena, error) {
	opts, err := opts.check("open")
	if err != nil {
		return nil, err
	}
	if !validName(name, arenaPrefix) {
		return nil, fmt.Errorf("shm arena: rank %d: %q is not an arena name (want %s and 32 hex digits)", opts.Rank, name, arenaPrefix)
	}
	path := filepath.Join(opts.Dir, name)
	fd, size, err := openOwned(path)
	if err != nil {
		return nil, fmt.Errorf("shm arena: rank %d: %w", opts.Rank, err)
	}
	defer syscall.Close(fd)
	dataOff := arenaDataOff(opts.Ranks)
	if size <= int64(dataOff) || size > int64(dataOff)+MaxArenaBytes {
		return nil, fmt.Errorf("shm arena: rank %d: %s has %d bytes, out of range for an arena of %d ranks", opts.Rank, path, size, opts.Ranks)
	}
	mem, err := syscall.Mmap(fd, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm arena: rank %d: mapping %s: %w", opts.Rank, path, err)
	}
	var bad string
	switch {
	case string(mem[:8]) != arenaMagic:
		bad = "bad magic"
	case binary.LittleEndian.Uint32(mem[8:]) != arenaVersion:
		bad = fmt.Sprintf("version %d, want %d", binary.LittleEndian.Uint32(mem[8:]), arenaVersion)
	case int(binary.LittleEndian.Uint32(mem[12:])) != opts.Ranks:
		bad = fmt.Sprintf("made for %d ranks, this job has %d", binary.LittleEndian.Uint32(mem[12:]), opts.Ranks)
	case binary.LittleEndian.Uint64(mem[16:]) != uint64(size)-uint64(dataOff):
		bad = fmt.Sprintf("its header says %d data bytes, the file holds %d", binary.LittleEndian.Uint64(mem[16:]), size-int64(dataOff))
	}
	if bad != "" {
		syscall.Munmap(mem)
		return nil, fmt.Errorf("shm arena: rank %d: %s is not a valid arena: %s", opts.Rank, path, bad)
	}
	return newArena(opts, path, mem, dataOff), nil
}

// newArena takes mem and fills in this rank's slot.
func newArena(opts ArenaOptions, path string, mem []byte, dataOff int) *Arena {
	a := &Arena{rank: opts.Rank, ranks: opts.Ranks, path: path, mem: mem, data: mem[dataOff:len(mem):len(mem)],
		spin: opts.Spin, poll: opts.Poll, gone: opts.Gone, lock: -1}
	slot := a.slot(opts.Rank)
	binary.LittleEndian.PutUint32(slot[arenaSlotPID:], uint32(os.Getpid()))
	binary.LittleEndian.PutUint64(slot[arenaSlotNS:], pidNS())
	a.word(slot, arenaSlotState).Store(arenaMapped)
	return a
}

// pidNS is the inode of this process's pid namespace, 0 when unknown.
func pidNS() uint64 {
	var st syscall.Stat_t
	if syscall.Stat("/proc/self/ns/pid", &st) != nil {
		return 0
	}
	return st.Ino
}

func (a *Arena) slot(r int) []byte {
	off := arenaSlotsOff + r*arenaSlotSize
	return a.mem[off : off+arenaSlotSize]
}

func (a *Arena) word(b []byte, off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&b[off]))
}

// Name is the file's name (without directory) to give the other ranks.
func (a *Arena) Name() string { return filepath.Base(a.path) }

// Bytes is the shared memory after the header: page-aligned, zero until a rank writes it.
func (a *Arena) Bytes() []byte { return a.data }

// Mapped reports whether rank r has mapped the arena (and not closed it).
func (a *Arena) Mapped(r int) bool {
	return r >= 0 && r < a.ranks && a.word(a.slot(r), arenaSlotState).Load() == arenaMapped
}

// Unlink removes the file; every mapping stays valid. Call it once every rank has mapped the
// arena (or none will): from then on nothing of the arena outlives the job's processes.
func (a *Arena) Unlink() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.unlinked {
		return nil
	}
	a.unlinked = true
	err := os.Remove(a.path)
	if a.lock >= 0 {
		syscall.Close(a.lock)
		a.lock = -1
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("shm arena: rank %d: %w", a.rank, err)
	}
	return nil
}

// Watch opens a pidfd on the process of every other rank that wrote its slot from this pid
// namespace, so that Wait notices a rank that exits at its next timeout. Call it once every
// rank has mapped the arena, before the first Wait. A rank without a pidfd (another pid
// namespace, an old kernel, a rank in this same process) is watched through its slot's state
// and ArenaOptions.Gone only.
func (a *Arena) Watch() {
	if a.watched.Load() {
		return
	}
	me, ns := os.Getpid(), pidNS()
	a.pidfds = make([]int, a.ranks)
	for r := range a.ranks {
		a.pidfds[r] = -1
		slot := a.slot(r)
		pid := int(binary.LittleEndian.Uint32(slot[arenaSlotPID:]))
		if r == a.rank || pid <= 0 || pid == me || ns == 0 || binary.LittleEndian.Uint64(slot[arenaSlotNS:]) != ns {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		a.pidfds[r] = fd
		a.pfds = append(a.pfds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		a.pfdRank = append(a.pfdRank, r)
	}
	a.watched.Store(true)
}

// Wait returns nil once the 32-bit word at byte offset off of Bytes no longer holds old. It
// returns an error when ctx ends, the arena is closed, or a rank is gone: its process exited,
// it closed its arena, or ArenaOptions.Gone says so.
func (a *Arena) Wait(ctx context.Context, off int, old uint32) error {
	if off < 0 || off%4 != 0 || off+4 > len(a.data) {
		return fmt.Errorf("shm arena: rank %d: wait on the word at %d of %d bytes", a.rank, off, len(a.data))
	}
	a.waiting.Add(1)
	defer a.waiting.Add(-1)
	if a.closed.Load() {
		return a.closedErr()
	}
	w := a.word(a.data, off)
	if w.Load() != old {
		return nil
	}
	if a.spin {
		for range arenaSpin {
			if w.Load() != old {
				return nil
			}
		}
	}
	if a.poll > 0 && a.yield(w, old) {
		return nil
	}
	ts := unix.NsecToTimespec(int64(arenaSleep))
	for {
		// FUTEX_WAIT (shared: the word is in a file mapping) returns at once if the word no
		// longer holds old, so a Wake between the load above and the sleep is not lost.
		syscall.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWait, uintptr(old),
			uintptr(unsafe.Pointer(&ts)), 0, 0)
		if w.Load() != old {
			return nil
		}
		if err := a.check(ctx); err != nil {
			return err
		}
		runtime.Gosched()
		if w.Load() != old {
			return nil
		}
	}
}

// yield polls w for up to ArenaOptions.Poll, letting the rank's other goroutines and then
// other processes run between looks, and reports whether w no longer holds old. It neither
// checks ctx nor the other ranks: Poll is short next to the sleeps after which Wait does.
func (a *Arena) yield(w *atomic.Uint32, old uint32) bool {
	until := time.Now().Add(a.poll)
	for {
		runtime.Gosched()
		syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		if w.Load() != old {
			return true
		}
		if time.Now().After(until) {
			return false
		}
	}
}

// check is the reason a Wait must stop, nil when it may sleep again.
func (a *Arena) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if a.closed.Load() {
		return a.closedErr()
	}
	for r := range a.ranks {
		if r != a.rank && a.word(a.slot(r), arenaSlotState).Load() == arenaClosed {
			return fmt.Errorf("shm arena: rank %d: rank %d closed its arena (its endpoint closed): %w", a.rank, r, ErrPeerGone)
		}
	}
	if a.watched.Load() && len(a.pfds) > 0 && a.pollMu.TryLock() {
		// One raw ppoll with a zero timeout asks the kernel about every watched rank at once.
		var zero unix.Timespec
		n, _, errno := syscall.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&a.pfds[0])), uintptr(len(a.pfds)),
			uintptr(unsafe.Pointer(&zero)), 0, 0, 0)
		gone := -1
		if errno == 0 && n > 0 {
			for i := range a.pfds {
				if a.pfds[i].Revents != 0 {
					gone = a.pfdRank[i]
					break
				}
			}
		}
		a.pollMu.Unlock()
		if gone >= 0 {
			pid := binary.LittleEndian.Uint32(a.slot(gone)[arenaSlotPID:])
			return fmt.Errorf("shm arena: rank %d: rank %d (process %d) exited: %w", a.rank, gone, pid, ErrPeerGone)
		}
	}
	if a.gone != nil {
		return a.gone()
	}
	return nil
}

func (a *Arena) closedErr() error {
	return fmt.Errorf("shm arena: rank %d: the arena is closed: %w", a.rank, net.ErrClosed)
}

// Wake wakes every rank waiting on the word at off of Bytes.
func (a *Arena) Wake(off int) {
	if off < 0 || off%4 != 0 || off+4 > len(a.data) || a.closed.Load() {
		return
	}
	syscall.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&a.data[off])), futexWake, uintptr(1<<31-1), 0, 0, 0)
}

// Close marks this rank's slot closed (the other ranks' Waits fail naming it), lets this
// rank's Waits return, and gives the memory back: the shared mapping is replaced by private
// zero pages of the same range, so that a collective still touching Bytes while its
// endpoint closes reads zeros instead of crashing the process. The range is the process's
// until it exits. Close also unlinks the file if this rank created it and Unlink was not
// called.
func (a *Arena) Close() error {
	if a.closed.Swap(true) {
		return nil
	}
	a.word(a.slot(a.rank), arenaSlotState).Store(arenaClosed)
	err := a.Unlink()
	for a.waiting.Load() > 0 {
		time.Sleep(time.Millisecond) // a Wait leaves within one sleep of the futex
	}
	for _, fd := range a.pidfds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	_, merr := unix.MmapPtr(-1, 0, unsafe.Pointer(&a.mem[0]), uintptr(len(a.mem)), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|unix.MAP_NORESERVE)
	if merr != nil && err == nil {
		err = fmt.Errorf("shm arena: rank %d: unmapping %s: %w", a.rank, a.path, merr)
	}
	return err
}
