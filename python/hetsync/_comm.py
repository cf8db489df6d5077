"""Communicators and requests over the C ABI."""

import ctypes
import os
import sys
import threading
import time

from . import _abi
from ._abi import HetsyncError
from ._buffers import view

# A blocking call on the main thread waits in slices of this many milliseconds, returning to
# Python between them, so that a signal's Python handler (KeyboardInterrupt, a SIGTERM
# handler) runs within a slice although Go holds the thread. That costs a hand-off between
# threads per call (the collective runs on a goroutine); other threads, which Python's signal
# handlers never run on, have the call run on their own thread instead.
WAIT_SLICE_MS = 100

# Before its first slice, a blocking call on the main thread polls for a while, every
# _POLL_GAP seconds, up to _POLL_FOR: a short call (one on a single host, any call on a
# communicator of one rank) then completes without the thread sleeping in Go. Sleeping there
# costs two thread wake-ups (the thread runs Go as a cgo callback, locked to it, so it hands its
# processor to another thread to run the call and gets it back to wake), polling none. The
# gaps are spent in Python, outside Go: a poll made at once, or Go spinning before it sleeps,
# holds the processor that the call's goroutine is waiting for and was measured slower.
# Polling pays only where the call's thread has a core of its own: on a host with fewer than
# two cores per local rank, the pollers take the cores the calls need (measured: 4 ranks on 2
# cores went from 125-149 to 224-241 us a call), so there a call goes straight to its slices.
_POLL_GAP = 5e-6
_POLL_FOR = 30e-6


def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1

# Calls interrupted by an exception while Go still used their buffers: their buffers stay
# alive here until Go is done with them, so that Go never writes into freed memory.
_abandoned = []


def _guard(comm):
    """Refuses calls from a process other than the one that formed the job: a child forked
    from a rank has none of the Go runtime's threads, and entering Go there would hang."""
    pid = os.getpid()
    if pid != comm._pid:
        raise HetsyncError(
            "hetsync: rank %d: called in process %d, a child forked from the rank's process %d; "
            "a forked child (a DataLoader worker, say) may use its own tensors but must not call "
            "hetsync" % (comm._rank, pid, comm._pid))
    if not comm._id:
        raise HetsyncError("hetsync: rank %d: the communicator is closed" % comm._rank)


class Work:
    """A non-blocking call in flight (torch's Work, MPI's Request). It holds the call's buffers
    alive until the call completes: wait() or is_completed() before touching them."""

    __slots__ = ("_req", "_views", "_pid", "_err", "_done", "_polls", "__weakref__")

    def __init__(self, req, views, pid, polls=False):
        self._req, self._views, self._pid, self._err, self._done = req, views, pid, None, False
        self._polls = polls
        if not req:
            self._finish(None)

    def _finish(self, err):
        self._done, self._req, self._err = True, 0, err
        if err is None:
            for v in self._views:
                if v.finish is not None:
                    v.finish()
        self._views = ()

    def _poll(self, ms):
        if self._done:
            return True
        if os.getpid() != self._pid:
            raise HetsyncError("hetsync: a request of process %d waited on in its forked child %d"
                               % (self._pid, os.getpid()))
        done = ctypes.c_int(0)
        p = _abi.lib.hs_wait(self._req, ms, ctypes.byref(done))
        if done.value:
            self._finish(_abi.text(p))
        elif p:
            raise HetsyncError(_abi.text(p))
        return self._done

    def wait(self, timeout=None):
        """Blocks until the call completes (or timeout seconds pass: then returns False) and
        raises its error. Signals are handled while it waits."""
        return self._wait(timeout, True)

    def _wait(self, timeout, poll):
        if timeout is None:
            if poll and self._polls and not self._done and threading.get_ident() == _MAIN_THREAD:
                done, err = _poll_briefly(self._req)
                if done:
                    self._finish(err)
            try:
                while not self._poll(WAIT_SLICE_MS):
                    pass
            except BaseException:
                if not self._done:
                    _abandoned.append(self)
                raise
        else:
            left = int(timeout * 1000)
            while not self._poll(max(0, min(WAIT_SLICE_MS, left))):
                left -= WAIT_SLICE_MS
                if left <= 0:
                    return False
        if self._err is not None:
            raise HetsyncError(self._err)
        return True

    def is_completed(self):
        """Whether the call has completed; never blocks. Its error is raised by wait()."""
        return self._poll(0)

    def __del__(self):
        # The buffers must outlive Go's use of them: a request dropped unwaited is waited for.
        # Not while the interpreter exits: the process, and Go's use of its memory, end with it,
        # and a request whose peers have gone may never complete.
        if not self._done and self._req and os.getpid() == self._pid and not sys.is_finalizing():
            try:
                self._poll(-1)
            except Exception:
                pass


_MAIN_THREAD = threading.main_thread().ident


def _poll_briefly(req):
    """Polls req every _POLL_GAP seconds for up to _POLL_FOR. Returns whether it completed and
    then its error (None or the message)."""
    done = ctypes.c_int(0)
    clock = time.perf_counter
    end = clock() + _POLL_FOR
    while True:
        gap = clock() + _POLL_GAP
        while clock() < gap:
            pass
        p = _abi.lib.hs_wait(req, 0, ctypes.byref(done))
        if done.value:
            return True, _abi.text(p)
        _abi.check(p)
        if clock() >= end:
            return False, None


def _run(comm, fn, args, views, async_op):
    """Issues fn(comm, *args, wait_ms, &req) and waits for it unless async_op. A blocking call
    that completes within its first wait returns with no Work made: this is the path every
    call that completes within the first slice takes, so it is kept short."""
    if comm._pid != os.getpid() or not comm._id:
        _guard(comm)
    req = ctypes.c_int64(0)
    main = not async_op and threading.get_ident() == _MAIN_THREAD
    wait_ms = 0 if async_op or main else -1
    p = fn(comm._id, *args, wait_ms, ctypes.byref(req))
    if p:
        raise HetsyncError(_abi.text(p))
    if main and req.value and comm._polls:
        done, err = _poll_briefly(req.value)
        if done:
            req.value = 0
            if err is not None:
                raise HetsyncError(err)
    if not req.value and not async_op:
        for v in views:
            if v.finish is not None:
                v.finish()
        return None
    w = Work(req.value, views, comm._pid, comm._polls)
    if async_op:
        return w
    w._wait(None, not main)
    return None


_OPS = {"sum": _abi.SUM, "avg": _abi.AVG, "mean": _abi.AVG, "min": _abi.MIN, "max": _abi.MAX,
        "prod": _abi.PROD, "product": _abi.PROD}


def _op(op):
    code = _OPS.get(str(op).lower())
    if code is None:
        raise ValueError("hetsync: unknown reduction %r: one of sum, avg, min, max, prod" % (op,))
    return code


class Comm:
    """A communicator: the job's (hetsync.init) or one made by split. Every collective works in
    place on a contiguous torch tensor or numpy array; with async_op=True it returns a Work."""

    def __init__(self, cid, pid, polls=None):
        self._id, self._pid = cid, pid
        r, s, lr, ls = (ctypes.c_int() for _ in range(4))
        _abi.check(_abi.lib.hs_info(cid, ctypes.byref(r), ctypes.byref(s), ctypes.byref(lr), ctypes.byref(ls)))
        self._rank, self._size, self._local_rank, self._local_size = r.value, s.value, lr.value, ls.value
        # A split Comm takes the job's choice: its own local size counts only its members.
        self._polls = _cores() >= 2 * self._local_size if polls is None else polls

    def rank(self):
        return self._rank

    def size(self):
        return self._size

    def local_rank(self):
        return self._local_rank

    def local_size(self):
        return self._local_size

    def settings(self):
        """The algorithm and transport this communicator runs with, as text."""
        _guard(self)
        return _abi.text(_abi.lib.hs_settings(self._id))

    def split(self, color, key=None):
        """MPI_Comm_split: ranks passing the same color >= 0 form a new Comm ranked by key (this
        rank by default); a negative color returns None. Every rank of this Comm must call it."""
        _guard(self)
        out = ctypes.c_int64(0)
        _abi.check(_abi.lib.hs_split(self._id, color, self._rank if key is None else key, ctypes.byref(out)))
        return Comm(out.value, self._pid, self._polls) if out.value else None

    def close(self):
        """Leaves the job (the job's Comm) or releases a split one. Idempotent."""
        if self._id and os.getpid() == self._pid:
            cid, self._id = self._id, 0
            _abi.check(_abi.lib.hs_close(cid))

    def allreduce(self, x, op="sum", async_op=False):
        v = view(x, "allreduce", True)
        return _run(self, _abi.lib.hs_allreduce, (v.ptr, v.count, v.code, _op(op)), [v], async_op)

    def reduce_scatter(self, x, op="sum", async_op=False):
        """Reduces x over the ranks; afterwards block rank() of size() equal blocks of x holds
        the result (the rest of x holds partial results)."""
        v = view(x, "reduce_scatter", True)
        return _run(self, _abi.lib.hs_reduce_scatter, (v.ptr, v.count, v.code, _op(op)), [v], async_op)

    def reduce(self, x, root=0, op="sum", async_op=False):
        v = view(x, "reduce", True)
        return _run(self, _abi.lib.hs_reduce, (v.ptr, v.count, v.code, _op(op), root), [v], async_op)

    def allgather(self, x, async_op=False):
        """Fills x (size() equal blocks) with each rank's block: rank i contributes block i."""
        v = view(x, "allgather", False, self._size)
        return _run(self, _abi.lib.hs_allgather, (v.ptr, v.count, v.code), [v], async_op)

    def broadcast(self, x, root=0, async_op=False):
        v = view(x, "broadcast", False)
        return _run(self, _abi.lib.hs_broadcast, (v.ptr, v.count, v.code, root), [v], async_op)

    def alltoall(self, send, recv, async_op=False):
        """Sends block j of send (size() equal blocks) to rank j; block i of recv receives rank
        i's. send and recv have the same dtype and number of bytes."""
        s = view(send, "alltoall", False, self._size)
        r = view(recv, "alltoall", False, self._size)
        if (s.code, s.count) != (r.code, r.count):
            raise ValueError("hetsync.alltoall: send (%d bytes) and recv (%d bytes) differ in size or dtype"
                             % (s.nbytes, r.nbytes))
        return _run(self, _abi.lib.hs_alltoall, (s.ptr, r.ptr, r.count, r.code), [s, r], async_op)

    def barrier(self, async_op=False):
        return _run(self, _abi.lib.hs_barrier, (), [], async_op)

    def send(self, x, dst, async_op=False):
        v = view(x, "send", False)
        return _run(self, _abi.lib.hs_send, (v.ptr, v.count, v.code, dst), [v], async_op)

    def recv(self, x, src, async_op=False):
        v = view(x, "recv", False)
        return _run(self, _abi.lib.hs_recv, (v.ptr, v.count, v.code, src), [v], async_op)
