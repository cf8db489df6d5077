"""hetsync for Python: the job, the collectives on torch tensors and numpy arrays, and the
torch.distributed backend "hetsync".

    import hetsync
    hetsync.init()                      # under `hetsync launch`, mpirun, srun, torchrun, or alone
    hetsync.allreduce(t, op="avg")      # in place on a contiguous tensor or array
    w = hetsync.broadcast(t, root=0, async_op=True); ...; w.wait()

Importing the package registers the torch.distributed backend (when torch is installed), so
`torch.distributed.init_process_group("hetsync")` works under `hetsync launch`, and the
rendezvous scheme "hetsync://", over which that backend's env:// runs: its store is the job's
own (hetsync.store), which only the job's ranks reach, and torch opens no port.

A process forms the job once. A child it forks (a DataLoader worker) may not call hetsync, and
a child it spawns may not join the job as its parent's rank: both are refused with an error.
The package installs no signal handler; a blocking call returns to Python every
WAIT_SLICE_MS milliseconds, so KeyboardInterrupt and the program's own handlers run while a
collective waits. docs/python.md is the guide.
"""

import atexit
import os
import sys

from ._abi import HetsyncError  # noqa: F401
from ._comm import Comm, Work, WAIT_SLICE_MS  # noqa: F401
from .session import Session, Round  # noqa: F401
from . import _abi

__all__ = ["HetsyncError", "Comm", "Work", "Session", "Round", "init", "is_initialized", "world", "rank", "size",
           "local_rank", "local_size", "split", "finalize", "allreduce", "reduce_scatter", "reduce",
           "allgather", "broadcast", "alltoall", "barrier", "send", "recv"]

# The variable through which a process that formed the job marks its environment, which its
# spawned children inherit: "pid identity".
_MARK = "HETSYNC_PYTHON_JOINED"
# The variables that say which rank of which job a process is, under each launcher hetsync.Init
# recognises (see the Go package's documentation).
_IDENTITY = ("HETSYNC_RENDEZVOUS", "HETSYNC_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "RANK",
             "MASTER_ADDR", "MASTER_PORT", "JOB_COMPLETION_INDEX")

_world = None


def _identity():
    return ",".join(os.environ.get(k, "") for k in _IDENTITY)


def init():
    """Forms the job that started this process, as hetsync.Init does in Go, and returns the
    job's Comm. Calling it again returns the same Comm."""
    global _world
    pid = os.getpid()
    if _world is not None:
        if _world._pid != pid:
            raise HetsyncError("hetsync.init: process %d is a child forked from rank %d's process %d; "
                               "a forked child cannot join the job" % (pid, _world.rank(), _world._pid))
        return _world
    ident = _identity()
    mark = os.environ.get(_MARK, "")
    parent, _, marked = mark.partition(" ")
    if parent and parent != str(pid) and marked == ident and ident.strip(","):
        raise HetsyncError(
            "hetsync.init: process %d inherited the rank environment of process %s, which already "
            "joined the job with it (%s=%s): a spawned child cannot join as its parent's rank; start "
            "ranks with `hetsync launch` (or unset %s in the child to run it as a job of its own)"
            % (pid, parent, _MARK, mark, _MARK))
    import ctypes
    out = ctypes.c_int64(0)
    _abi.check(_abi.lib.hs_init(ctypes.byref(out)))
    _world = Comm(out.value, pid)
    # Leave the job at exit, as mpi4py finalizes MPI: a rank that ends without closing its
    # Comm is reported by its peers as one that exited while still in the job. close() is
    # idempotent and does nothing in a forked child, so a program's own finalize() is fine.
    atexit.register(finalize)
    os.environ[_MARK] = "%d %s" % (pid, ident)
    return _world


def is_initialized():
    return _world is not None


def world():
    """The job's Comm; init() first."""
    if _world is None:
        raise HetsyncError("hetsync: not initialized: call hetsync.init() first")
    return _world


def finalize():
    """Leaves the job (closing the job's torch.distributed store first, if one was made). The
    process cannot form it again."""
    if _world is not None:
        store = sys.modules.get(__name__ + ".store")
        try:
            if store is not None:
                store.close()
        finally:
            _world.close()


def rank():
    return world().rank()


def size():
    return world().size()


def local_rank():
    return world().local_rank()


def local_size():
    return world().local_size()


def split(color, key=None):
    return world().split(color, key)


def allreduce(x, op="sum", async_op=False):
    return world().allreduce(x, op, async_op)


def reduce_scatter(x, op="sum", async_op=False):
    return world().reduce_scatter(x, op, async_op)


def reduce(x, root=0, op="sum", async_op=False):
    return world().reduce(x, root, op, async_op)


def allgather(x, async_op=False):
    return world().allgather(x, async_op)


def broadcast(x, root=0, async_op=False):
    return world().broadcast(x, root, async_op)


def alltoall(send, recv, async_op=False):
    return world().alltoall(send, recv, async_op)


def barrier(async_op=False):
    return world().barrier(async_op)


def send(x, dst, async_op=False):
    return world().send(x, dst, async_op)


def recv(x, src, async_op=False):
    return world().recv(x, src, async_op)


try:
    import torch.distributed as _dist
except ImportError:
    _dist = None
if _dist is not None and _dist.is_available():
    from . import torch_backend as _tb
    _tb.register()
    from . import store as _store
    _store.register()
