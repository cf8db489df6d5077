package collective

import "github.com/hetsync/hetsync/transport"

// Shared-memory case of auto's cost model. When every rank of the job reaches every other over
// shared memory (transport/shm's pipes) and no link matrix was given, auto replays its
// candidates on sharedMemoryModel instead of the network's α-β pair. Its difference from the
// network is the reduction: on a network it hides behind the link's far slower transfer, on
// shared memory it is one more pass of the CPU over the bytes, so an algorithm that reduces the
// whole vector at every step (recursive doubling) pays for the message it saves once the vector
// is large (p = 2 from 1 MiB). docs/results/shm-path.md has the measurements.

// Costs of the shared-memory model: ShmAlpha (s) is a message's latency and ShmBeta (s/B) its
// time per byte as a rank sees them when the ranks outnumber the cores (a message waits for its
// receiver to be scheduled, and the copies share the cores), ShmReduceBeta (s/B) the time per
// byte of the reduction kernel on a received segment that is still in the cache. A job's
// ranks outnumber its cores where choosing well matters most, so the model takes their costs
// there (docs/results/collective-constants.md).
const (
	ShmAlpha      = 15e-6
	ShmBeta       = 0.5e-9
	ShmReduceBeta = 0.06e-9
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
	d, ok := transport.As[dataPather](ep)
	if !ok {
		return false
	}
	paths := d.DataPaths()
	if len(paths) < 2 || len(paths) != ep.Size() {
		return false
	}
	for r, path := range paths {
		if r != ep.Rank() && path != "shm" && path != "cma" {
			return false
		}
	}
	return true
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
	return a.shm && a.lay == nil
}
