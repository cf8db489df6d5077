//go:build linux

package shm

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// Segment is a mapped shared-memory file, before it becomes a Pipe.
type Segment struct {
	opts     Options
	path     string
	mem      []byte
	ringSize int
	creator  bool
	// probe is the nonce the peer reads from this process's memory at connect time to prove
	// that it may (see SingleCopy); it stays reachable, and so in place, as long as the
	// segment and its pipe.
	probe *[probeLen]byte
	// mirror is the ring this side reads mapped twice, back to back (see Pipe.Lend); nil when
	// it could not be mapped.
	mirror []byte

	mu sync.Mutex
	// lock is the creator's descriptor of the file, with a shared flock on it. The kernel keeps
	// the lock while the descriptor or the mapping lives and drops it when the process dies,
	// so SweepStale, which removes only files nobody holds, never takes a live job's. -1: none.
	lock     int
	unlinked bool
	handed   bool // the mapping belongs to a Pipe now
}

// Create makes a new segment file in opts.Dir with two rings of opts.RingSize bytes, maps it
// and returns it. The caller sends Name() to the peer (over an authenticated channel), which
// Opens it; then either side Unlinks it.
func Create(opts Options) (*Segment, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	size := dataOff + 2*opts.RingSize
	path, fd, err := createLocked(opts.Dir, namePrefix)
	if errors.Is(err, syscall.ENOSPC) {
		err = newFullError(opts.Dir, int64(size)) // no inode left
	}
	if err != nil {
		return nil, fmt.Errorf("shm segment for %s: %w", opts.Peer, err)
	}
	keep := false
	defer func() {
		if !keep {
			syscall.Close(fd)
		}
	}()
	// Reserve the pages now: on a full tmpfs a sparse file would fail later with SIGBUS on
	// first touch instead of an error here.
	if err := syscall.Fallocate(fd, 0, 0, int64(size)); err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			os.Remove(path)
			return nil, fmt.Errorf("shm segment for %s: %w", opts.Peer, newFullError(opts.Dir, int64(size)))
		}
		if !errors.Is(err, syscall.EOPNOTSUPP) {
			os.Remove(path)
			return nil, fmt.Errorf("shm segment for %s: reserving %d bytes for %s: %w", opts.Peer, size, path, err)
		}
		if err := syscall.Ftruncate(fd, int64(size)); err != nil {
			os.Remove(path)
			return nil, fmt.Errorf("shm segment for %s: sizing %s: %w", opts.Peer, path, err)
		}
	}
	mem, err := syscall.Mmap(fd, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("shm segment for %s: mapping %s: %w", opts.Peer, path, err)
	}
	copy(mem, magic)
	binary.LittleEndian.PutUint32(mem[8:], version)
	binary.LittleEndian.PutUint32(mem[12:], uint32(opts.RingSize))
	probe, err := writeProcBlock(mem, 0)
	if err != nil {
		syscall.Munmap(mem)
		os.Remove(path)
		return nil, fmt.Errorf("shm segment for %s: %w", opts.Peer, err)
	}
	keep = true
	// The creator reads ring 1. Without the mirror the pipe works; it only lends nothing.
	mirror, _ := mapMirror(fd, dataOff+int64(opts.RingSize), opts.RingSize)
	return &Segment{opts: opts, path: path, mem: mem, ringSize: opts.RingSize, creator: true, lock: fd, probe: probe, mirror: mirror}, nil
}

// validName reports whether name is one createLocked could have made with prefix (namePrefix
// for a pipe's segment, arenaPrefix for an arena): the prefix and 32 lowercase hex digits,
// nothing that could point outside the directory.
func validName(name, prefix string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok || len(rest) != 32 {
		return false
	}
	_, err := hex.DecodeString(rest)
	return err == nil && strings.ToLower(rest) == rest
}

// Open maps the segment the peer created under name in opts.Dir. The ring size is the
// creator's; opts.RingSize is ignored. The file must be a regular file owned by this
// process's effective user, with a valid header.
func Open(name string, opts Options) (*Segment, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if !validName(name, namePrefix) {
		return nil, fmt.Errorf("shm segment from %s: %q is not a segment name (want %s and 32 hex digits)", opts.Peer, name, namePrefix)
	}
	path := filepath.Join(opts.Dir, name)
	fd, fsize, err := openOwned(path)
	if err != nil {
		return nil, fmt.Errorf("shm segment from %s: %w", opts.Peer, err)
	}
	defer syscall.Close(fd)
	if fsize < dataOff+2*MinRingSize || fsize > dataOff+2*MaxRingSize {
		return nil, fmt.Errorf("shm segment from %s: %s has %d bytes, out of range for a segment", opts.Peer, path, fsize)
	}
	size := int(fsize)
	mem, err := syscall.Mmap(fd, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("shm segment from %s: mapping %s: %w", opts.Peer, path, err)
	}
	ring := int(binary.LittleEndian.Uint32(mem[12:]))
	var bad string
	switch {
	case string(mem[:8]) != magic:
		bad = "bad magic"
	case binary.LittleEndian.Uint32(mem[8:]) != version:
		bad = fmt.Sprintf("version %d, want %d", binary.LittleEndian.Uint32(mem[8:]), version)
	case ring < MinRingSize || ring > MaxRingSize || ring&(ring-1) != 0:
		bad = fmt.Sprintf("ring size %d invalid", ring)
	case size != dataOff+2*ring:
		bad = fmt.Sprintf("%d bytes for a ring size of %d", size, ring)
	}
	if bad != "" {
		syscall.Munmap(mem)
		return nil, fmt.Errorf("shm segment from %s: %s is not a valid segment: %s", opts.Peer, path, bad)
	}
	probe, err := writeProcBlock(mem, 1)
	if err != nil {
		syscall.Munmap(mem)
		return nil, fmt.Errorf("shm segment from %s: %w", opts.Peer, err)
	}
	// The opener reads ring 0. Without the mirror the pipe works; it only lends nothing.
	mirror, _ := mapMirror(fd, dataOff, ring)
	return &Segment{opts: opts, path: path, mem: mem, ringSize: ring, lock: -1, probe: probe, mirror: mirror}, nil
}

// openOwned opens the file at path to map it, and returns its descriptor and size: it must
// be a regular file (not a link) that belongs to this process's effective user, as a file
// another rank created for this job does.
func openOwned(path string) (int, int64, error) {
	fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return -1, 0, fmt.Errorf("opening %s: %w", path, err)
	}
	var st syscall.Stat_t
	bad := syscall.Fstat(fd, &st)
	switch {
	case bad != nil:
		bad = fmt.Errorf("stat %s: %w", path, bad)
	case st.Mode&syscall.S_IFMT != syscall.S_IFREG:
		bad = fmt.Errorf("%s is not a regular file", path)
	case int(st.Uid) != os.Geteuid():
		bad = fmt.Errorf("%s belongs to uid %d, not to this process's uid %d", path, st.Uid, os.Geteuid())
	}
	if bad != nil {
		syscall.Close(fd)
		return -1, 0, bad
	}
	return fd, st.Size, nil
}

// Name is the file name (without directory) to give the peer.
func (s *Segment) Name() string { return filepath.Base(s.path) }

// Path is the file's full path.
func (s *Segment) Path() string { return s.path }

// RingSize is the capacity of each direction in bytes.
func (s *Segment) RingSize() int { return s.ringSize }

// Unlink removes the segment's file; the mappings stay valid. Either side may call it, more
// than once; a file already removed is not an error.
func (s *Segment) Unlink() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unlinked {
		return nil
	}
	s.unlinked = true
	err := os.Remove(s.path)
	s.releaseLocked()
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("shm segment for %s: %w", s.opts.Peer, err)
	}
	return nil
}

// releaseLocked closes the creator's locked descriptor; s.mu must be held.
func (s *Segment) releaseLocked() {
	if s.lock >= 0 {
		syscall.Close(s.lock)
		s.lock = -1
	}
}

// release closes the creator's locked descriptor, if Unlink has not.
func (s *Segment) release() {
	s.mu.Lock()
	s.releaseLocked()
	s.mu.Unlock()
}

// Close unmaps a segment that did not become a Pipe, and unlinks it if this side created it.
// After Pipe it does nothing (the Pipe owns the mapping).
func (s *Segment) Close() error {
	s.mu.Lock()
	handed := s.handed
	s.handed = true
	s.mu.Unlock()
	if handed {
		return nil
	}
	var err error
	if s.creator {
		err = s.Unlink()
	}
	s.release()
	if merr := syscall.Munmap(s.mem); merr != nil && err == nil {
		err = fmt.Errorf("shm segment for %s: unmapping %s: %w", s.opts.Peer, s.path, merr)
	}
	if s.mirror != nil {
		if merr := syscall.Munmap(s.mirror); merr != nil && err == nil {
			err = fmt.Errorf("shm segment for %s: unmapping the mirror of %s: %w", s.opts.Peer, s.path, merr)
		}
	}
	s.mem, s.mirror = nil, nil
	return err
}

// createLocked creates a new file of a random name (prefix and 32 hex digits) in dir, only
// for this user, and holds its lock, so that a sweep never takes the file of a live creator.
// A directory without flock leaves the file unlocked, and the sweep, unable to lock it
// either, leaves it alone.
func createLocked(dir, prefix string) (path string, fd int, err error) {
	var rnd [16]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", -1, fmt.Errorf("drawing a name: %w", err)
	}
	path = filepath.Join(dir, prefix+hex.EncodeToString(rnd[:]))
	fd, err = syscall.Open(path, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return "", -1, fmt.Errorf("creating %s: %w", path, err)
	}
	_ = HoldLock(fd)
	return path, fd, nil
}
