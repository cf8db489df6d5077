package p2p

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/hetsync/hetsync/transport/shm"
)

// A rank proves where it runs instead of trusting a host name: containers, network namespaces
// and cloned machine images share names. Each rank writes a file of random bytes into the
// host's shared-memory directory and publishes the file's name, the SHA-256 of its content and
// the identity of its network namespace in the peer table. A peer that can read that file and
// finds the published hash shares the rank's memory, hence its host (its kernel); when their
// network namespaces are one too, the pair may take the same-host shortcuts (shared memory,
// Unix sockets). Ranks in different namespaces of one kernel talk over a (virtual) network, so
// they count as different hosts: their traffic costs what a network costs.

const (
	proofPrefix   = "hetsync-host-" // + job tag + "-" + rank + "-" + 16 hex digits
	proofTokenLen = 32
	netNSLink     = "/proc/self/ns/net"
)

// hostProof is what a rank publishes about its host.
type hostProof struct {
	File  string `json:"file,omitempty"`  // base name in the shared-memory directory; "" when none could be written
	Hash  []byte `json:"hash,omitempty"`  // SHA-256 of the file's content
	NetNS string `json:"netns,omitempty"` // the target of /proc/self/ns/net, e.g. "net:[4026531840]"; "" when unknown
}

// proofFile is a rank's own proof and the file behind it, removed by remove. The file stays
// open, locked with shm.HoldLock, so that a sweep by another job's rank never takes it while
// this rank lives.
type proofFile struct {
	proof hostProof
	path  string
	held  *os.File
}

// newProofFile writes this rank's proof file into dir. A directory that cannot take the file
// is no error: the rank then proves no shared host and the reason says why.
func newProofFile(dir string, tag jobTag, rank int) (*proofFile, error) {
	token := make([]byte, proofTokenLen)
	suffix := make([]byte, 8)
	if _, err := rand.Read(token); err != nil {
		return nil, fmt.Errorf("drawing the host-proof token: %w", err)
	}
	if _, err := rand.Read(suffix); err != nil {
		return nil, fmt.Errorf("drawing the host-proof file name: %w", err)
	}
	pf := &proofFile{}
	pf.proof.NetNS, _ = os.Readlink(netNSLink)
	name := fmt.Sprintf("%s%s-%d-%s", proofPrefix, tag, rank, hex.EncodeToString(suffix))
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return pf, nil
	}
	_ = shm.HoldLock(int(f.Fd())) // without flock here, the sweep cannot take the file either
	if _, werr := f.Write(token); werr != nil {
		f.Close()
		os.Remove(path)
		return pf, nil
	}
	sum := sha256.Sum256(token)
	pf.proof.File, pf.proof.Hash, pf.path, pf.held = name, sum[:], path, f
	return pf, nil
}

// remove deletes the proof file. Peers read it while they join, so it lives until the
// endpoint closes (or the join fails).
func (pf *proofFile) remove() {
	if pf != nil && pf.path != "" {
		os.Remove(pf.path)
		pf.held.Close()
		pf.path, pf.held = "", nil
	}
}

// locality is one rank's verdict on a peer: whether they share a host (and network
// namespace), and if not, why, for the errors of the data paths that need one host.
type locality struct {
	same bool
	why  string
	// kernel: the peer's proof file was read, so the two share a kernel (procwatch.go),
	// whether or not they share a network namespace.
	kernel bool
	// netApart: they share a kernel but not a network namespace, so a link between them can
	// fail while both processes run.
	netApart bool
}

// proveLocality decides whether rank me shares its host with rank them, reading them's proof
// file from dir. An explicit host name (Config.Hostname, HETSYNC_HOSTNAME) can only part
// ranks: two ranks that both set one and set different ones never share a host, and ranks
// with equal names still have to prove it.
func proveLocality(dir string, me, them peerInfo) locality {
	if me.Rank == them.Rank {
		return locality{same: true}
	}
	if me.HostOverride != "" && them.HostOverride != "" && me.HostOverride != them.HostOverride {
		return locality{why: fmt.Sprintf("their host names differ: %q and %q (Config.Hostname / HETSYNC_HOSTNAME)",
			me.HostOverride, them.HostOverride)}
	}
	if err := readProof(dir, them.Proof); err != nil {
		return locality{why: fmt.Sprintf("rank %d cannot read the host proof of rank %d: %v", me.Rank, them.Rank, err)}
	}
	switch {
	case me.Proof.NetNS == "" || them.Proof.NetNS == "":
		return locality{kernel: true, why: fmt.Sprintf("the network namespace of rank %d or rank %d is unknown (%s unreadable)",
			me.Rank, them.Rank, netNSLink)}
	case me.Proof.NetNS != them.Proof.NetNS:
		return locality{kernel: true, netApart: true, why: fmt.Sprintf("they share memory but not a network namespace (%s and %s)",
			me.Proof.NetNS, them.Proof.NetNS)}
	}
	return locality{same: true, kernel: true}
}

var errNoProof = errors.New("it published none (it could not write to its shared-memory directory)")

// readProof checks that the file p names in dir holds the bytes whose hash p publishes.
func readProof(dir string, p hostProof) error {
	if p.File == "" {
		return errNoProof
	}
	if !strings.HasPrefix(p.File, proofPrefix) || strings.ContainsAny(p.File, `/\`) || len(p.Hash) != sha256.Size {
		return fmt.Errorf("malformed proof (file %q, %d-byte hash)", p.File, len(p.Hash))
	}
	path := filepath.Join(dir, p.File)
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w (another host, or another %s)", err, dir)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, proofTokenLen+1))
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	sum := sha256.Sum256(b)
	if subtle.ConstantTimeCompare(sum[:], p.Hash) != 1 {
		return fmt.Errorf("%s holds other bytes than the ones it published (another host's file of that name)", path)
	}
	return nil
}

// proveAll is this rank's verdict on every rank of the table.
func proveAll(dir string, me int, peers []peerInfo) []locality {
	out := make([]locality, len(peers))
	for r := range peers {
		out[r] = proveLocality(dir, peers[me], peers[r])
	}
	return out
}
