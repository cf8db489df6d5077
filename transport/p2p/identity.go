package p2p

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// rankKey derives the Ed25519 identity of rank from the job secret:
// seed = SHA-256(secret || uint64 big-endian rank). Every rank can therefore compute every
// peer's ID before it dials, and a process without the secret cannot produce a member's key.
func rankKey(secret string, rank int) (crypto.PrivKey, error) {
	h := sha256.New()
	h.Write([]byte(secret))
	var r [8]byte
	binary.BigEndian.PutUint64(r[:], uint64(rank))
	h.Write(r[:])
	seed := h.Sum(nil)
	return crypto.UnmarshalEd25519PrivateKey(ed25519.NewKeyFromSeed(seed))
}

// jobIDs returns the peer ID of every rank of a job of the given size.
func jobIDs(secret string, size int) ([]peer.ID, error) {
	ids := make([]peer.ID, size)
	for r := range ids {
		sk, err := rankKey(secret, r)
		if err != nil {
			return nil, fmt.Errorf("deriving the key of rank %d: %w", r, err)
		}
		if ids[r], err = peer.IDFromPrivateKey(sk); err != nil {
			return nil, fmt.Errorf("deriving the peer ID of rank %d: %w", r, err)
		}
	}
	return ids, nil
}

// jobTag is a short public name of the job (for socket names and the direct-path hello). It is
// a hash of the secret, so it reveals nothing about the secret itself.
type jobTag [8]byte

func newJobTag(secret string) jobTag {
	s := sha256.Sum256(append([]byte("hetsync job tag\x00"), secret...))
	var t jobTag
	copy(t[:], s[:])
	return t
}

func (t jobTag) String() string { return hex.EncodeToString(t[:]) }

// memberGater admits only connections whose (claimed, and with TLS authenticated) remote peer
// ID is one of the job's ranks. It counts refusals so tests and logs can see them.
type memberGater struct {
	members map[peer.ID]int
	refused atomic.Int64
}

func newMemberGater(ids []peer.ID) *memberGater {
	g := &memberGater{members: make(map[peer.ID]int, len(ids))}
	for r, id := range ids {
		g.members[id] = r
	}
	return g
}

func (g *memberGater) admit(p peer.ID) bool {
	_, ok := g.members[p]
	if !ok {
		g.refused.Add(1)
	}
	return ok
}

func (g *memberGater) InterceptPeerDial(p peer.ID) bool                 { return g.admit(p) }
func (g *memberGater) InterceptAddrDial(p peer.ID, _ ma.Multiaddr) bool { return g.admit(p) }

// InterceptAccept cannot know the peer yet; the decision happens once it is secured.
func (g *memberGater) InterceptAccept(network.ConnMultiaddrs) bool { return true }

func (g *memberGater) InterceptSecured(_ network.Direction, p peer.ID, _ network.ConnMultiaddrs) bool {
	return g.admit(p)
}

func (g *memberGater) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) {
	return true, 0
}
