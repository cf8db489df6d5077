package collective

import "github.com/hetsync/hetsync/transport"

// Shared-memory case of auto's cost model. When every rank of the job reaches every other over
// shared memory (transport/shm's pipes) and no link matrix was given, auto replays its
// candidates on sharedMemoryModel instead of the network's α-β pair. On shared memory a message
// costs a wake-up and two passes of the CPU over its bytes (the sender's copy into the ring, the
// reader's copy out of it, or a lend), and a reduction is a third pass, which on a network hides
// behind the link's far slower transfer. The reduction's cost is what moves the choices: an
// algorithm that reduces the whole vector at every step (recursive doubling, the fold of
// butterfly for p not a power of two) pays for it once the vector is more than a few pages.
// docs/results/shm-path.md has the measurements the constants come from.

// Costs of the shared-memory model (s per message, s per byte) on one host with two ranks per
// core: ShmAlpha is a message's latency (the receiver's wake-up included), ShmBeta the time per
// byte of a message (its copies in and out), ShmReduceBeta the time per byte of reducing a
// received segment into the buffer.
const (
	ShmAlpha      = 8e-6
	ShmBeta       = 0.12e-9
	ShmReduceBeta = 0.12e-9
)

// sharedMemoryModel is the model auto replays on when all ranks share memory.
func sharedMemoryModel() *netModel {
	m := uniformModel(ShmAlpha, ShmBeta)
	m.reduceBeta = ShmReduceBeta
	return m
}

// dataPather is implemented by endpoints that report the data path of each peer's connection
// ("shm", "cma", "unix", "tcp", ...; "" for the rank itself), as transport/p2p's endpoint does.
type dataPather interface {
	DataPaths() []string
}

// onSharedMemory reports whether every peer of ep (the job's endpoint, under any decorators) is
// reached over a shared-memory pipe. An endpoint that cannot tell is not: the in-process
// endpoint and the network paths keep the network model.
func onSharedMemory(ep transport.Endpoint) bool {
	for ep != nil {
		if d, ok := ep.(dataPather); ok {
			paths := d.DataPaths()
			if len(paths) < 2 {
				return false
			}
			for r, path := range paths {
				if r != ep.Rank() && path != "shm" && path != "cma" {
					return false
				}
			}
			return true
		}
		u, ok := ep.(transport.Decorator)
		if !ok {
			return false
		}
		ep = u.Unwrap()
	}
	return false
}

// useSharedMemory makes auto plan on sharedMemoryModel when it has no link matrix. Call it
// before the first decision.
func (a *auto) useSharedMemory() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.shm = true
	clear(a.choice)
}

// sharedMemory reports whether auto plans on the shared-memory model.
func (a *auto) sharedMemory() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.shm && a.net == nil
}
