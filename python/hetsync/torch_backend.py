"""The torch.distributed backend "hetsync": a ProcessGroup whose collectives run on hetsync.

    import hetsync, torch.distributed as dist
    dist.init_process_group("hetsync")        # env://, under `hetsync launch`

The default group is the job's Comm (hetsync.init). torch.distributed.new_group makes its group
with Comm.split: split is a call every rank of the job makes, while torch asks only the new
group's members to create it, so register() wraps new_group to split on every rank first (and
changes nothing while the default group runs another backend).

The calls are asynchronous: each starts its hetsync call without waiting and returns a Work
that completes when the call does, so DDP's reducer overlaps each gradient bucket's allreduce
with the rest of backward. Two kinds of Work, because torch 1.13's C++ waits only on a Work made
from a future (_create_work_from_future) and that Work's wait() ignores the future's error:

- A call from torch.distributed's Python functions (dist.all_reduce and the rest) gets a
  _Call, a Python Work whose wait() waits on the calling thread (in slices, so signals are
  handled) and raises the call's HetsyncError.
- A call from C++ (DDP's reducer, _broadcast_coalesced) gets a Work made from a torch future that
  the group's waiter thread completes, in the order of issue, with the result or the error:
  the reducer reads the future's value, which raises the error. Only allreduce (what the reducer
  overlaps) is handed over this way; the other calls C++ makes (broadcast and allgather when DDP
  starts) complete before they return, so that their errors are raised, not dropped by wait().
"""

import functools
import inspect
import os
import queue
import sys
import threading

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup, Work, _create_work_from_future

import hetsync
from ._abi import HetsyncError

NAME = "hetsync"


def _reduce_op(op):
    for torch_op, name in ((dist.ReduceOp.SUM, "sum"), (dist.ReduceOp.AVG, "avg"), (dist.ReduceOp.MIN, "min"),
                           (dist.ReduceOp.MAX, "max"), (dist.ReduceOp.PRODUCT, "prod")):
        if op == torch_op:
            return name
    raise ValueError("hetsync backend: reduction %s is not supported: SUM, AVG, MIN, MAX or PRODUCT" % (op,))


class _Call(Work):
    """One backend call in flight: the hetsync requests it started, what to do once they have
    completed (copy a staged result out), and the result torch expects. It holds the tensors
    alive until then. Whichever thread completes it first (a wait(), the waiter thread) does so
    once, under its lock; a main thread waiting for the lock still handles signals."""

    def __init__(self, works, then, result):
        super().__init__()
        self._works, self._then, self._result = works, then, result
        self._lock = threading.Lock()
        self._done, self._err, self._fut = False, None, None

    def _complete(self):
        with self._lock:
            if self._done:
                return
            try:
                for w in self._works:
                    w.wait()
                if self._then is not None:
                    self._then()
            except Exception as e:  # the call's HetsyncError, or a failed copy of its result
                self._err = e
            finally:
                # An interrupted wait (KeyboardInterrupt) leaves the call pending: the hetsync
                # Work keeps its buffers alive until Go is done with them.
                if self._err is not None or all(w.is_completed() for w in self._works):
                    self._done, self._works, self._then = True, (), None

    def _settle(self):
        """Completes the call and its future, if one was asked for."""
        self._complete()
        if self._fut is not None and not self._fut.done():
            if self._err is not None:
                self._fut.set_exception(self._err)
            else:
                self._fut.set_result(self._result)

    def wait(self, timeout=None):
        self._complete()
        if self._err is not None:
            raise self._err
        return True

    def is_completed(self):
        if not self._done and all(w.is_completed() for w in self._works):
            self._complete()
        return self._done

    def is_success(self):
        return self.is_completed() and self._err is None

    def exception(self):
        return self._err

    def result(self):
        return self._result

    def get_future(self):
        if self._fut is None:
            self._fut = _future(self._result)
            if self._done:
                self._settle()
            else:
                _waiter(self).put(self)
        return self._fut


# The waiter threads, one per process (a forked child has none of its parent's threads), each
# completing the calls handed to it in the order of issue, which is the order they complete
# in on a communicator.
_waiters = {}
_waiters_lock = threading.Lock()


def _waiter(call):
    pid = os.getpid()
    with _waiters_lock:
        q = _waiters.get(pid)
        if q is None:
            q = _waiters[pid] = queue.SimpleQueue()
            threading.Thread(target=_wait_loop, args=(q,), name="hetsync-waiter", daemon=True).start()
    return q


def _wait_loop(q):
    while True:
        q.get()._settle()


def _from_python(depth):
    """Whether the backend method depth frames up was called by torch.distributed's Python
    functions, which wait on the Work in Python, rather than from C++."""
    return sys._getframe(depth + 1).f_globals.get("__name__") == "torch.distributed.distributed_c10d"


def _handed(call, asynchronous):
    """call as the Work a backend method returns: itself to torch's Python functions; to C++, a
    Work over a future, which the waiter completes when asynchronous, else completed now."""
    if _from_python(2):
        return call
    if not asynchronous:
        call.wait()
        fut = _future(call.result())
        fut.set_result(call.result())
        return _create_work_from_future(fut)
    # The Python future's exception is only a value to C++ (torch's set_exception unwraps it in
    # Python alone); a callback that raises it sets a C++ error, which the reducer's read of the
    # value raises (as a RuntimeError that carries the HetsyncError's message).
    return _create_work_from_future(call.get_future().then(_value))


def _value(fut):
    return fut.value()


def _future(result):
    """A torch future for result (the call's tensors, or lists of them). One whose value holds
    GPU tensors must name their devices: torch then orders a reader's use of them after the
    streams that wrote them (the staged copy back), and refuses a value on a device not named."""
    devices, todo = set(), [result]
    while todo:
        x = todo.pop()
        if isinstance(x, torch.Tensor):
            if x.device.type != "cpu":
                devices.add(x.device)
        elif isinstance(x, (list, tuple)):
            todo.extend(x)
    if devices:
        return torch.futures.Future(devices=sorted(devices, key=str))
    return torch.futures.Future()


def _one(tensors, call):
    if len(tensors) != 1:
        raise ValueError("hetsync backend: %s takes one tensor per process, got %d" % (call, len(tensors)))
    return tensors[0]


class ProcessGroupHetsync(ProcessGroup):
    """A torch ProcessGroup over a hetsync Comm."""

    def __init__(self, comm):
        super().__init__(comm.rank(), comm.size())
        self.comm = comm

    def getBackendName(self):
        return NAME

    def _contig(self, t, fn):
        """Starts fn(x) (a non-blocking hetsync call) on t, through a contiguous copy when t is
        not contiguous; returns the Work and what to do once it has completed."""
        if t.is_contiguous():
            return fn(t), None
        c = t.contiguous()
        return fn(c), lambda: t.copy_(c)

    def _moved(self, t, fn):
        """Starts fn, a call that only moves data, on t; when t's bytes are not whole 4-byte
        words (a uint8 tensor of any length, as broadcast_object_list sends), on a padded copy."""
        nbytes = t.numel() * t.element_size()
        if nbytes % 4 == 0:
            return self._contig(t, fn)
        words = torch.zeros((nbytes + 3) // 4, dtype=torch.int32)
        raw = words.view(torch.uint8)[:nbytes]
        raw.copy_(t.detach().reshape(-1).cpu().contiguous().view(torch.uint8))
        return fn(words), lambda: t.copy_(raw.view(t.dtype).reshape(t.shape))

    def _each(self, tensors, start, result):
        """A _Call of start(t) (a (Work, then) pair) for every tensor."""
        pairs = [start(t) for t in tensors]
        thens = [f for _, f in pairs if f is not None]
        then = (lambda: [f() for f in thens]) if thens else None
        return _Call([w for w, _ in pairs], then, result)

    def _allreduce(self, tensors, opts):
        op = _reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        return self._each(tensors, lambda t: self._contig(t, lambda x: self.comm.allreduce(x, op, True)), tensors)

    def allreduce(self, tensors, opts=None):
        return _handed(self._allreduce(tensors, opts), True)

    def allreduce_coalesced(self, tensors, opts=None):
        return _handed(self._allreduce(tensors, opts), True)

    def reduce(self, tensors, opts):
        op = _reduce_op(opts.reduceOp)
        t = _one(tensors, "reduce")
        return _handed(self._each([t], lambda x: self._contig(x, lambda y: self.comm.reduce(y, opts.rootRank, op, True)),
                                  tensors), False)

    def broadcast(self, tensors, opts):
        return _handed(self._each(tensors, lambda t: self._moved(t, lambda x: self.comm.broadcast(x, opts.rootRank, True)),
                                  tensors), False)

    def _gather_flat(self, inp):
        """Starts gathering every rank's inp into one flat tensor of size() padded slots (whole
        8-byte words, so any dtype and length gather at word boundaries); returns the Work and
        the function that gives the ranks' parts once it has completed."""
        p = self.size()
        nbytes = inp.numel() * inp.element_size()
        words = (nbytes + 7) // 8
        flat = torch.zeros(p * words, dtype=torch.int64)
        slot = flat[self.rank() * words:(self.rank() + 1) * words].view(torch.uint8)[:nbytes]
        slot.copy_(inp.detach().reshape(-1).cpu().contiguous().view(torch.uint8))
        w = self.comm.allgather(flat, True)
        return w, lambda: [flat[r * words:(r + 1) * words].view(torch.uint8)[:nbytes].view(inp.dtype) for r in range(p)]

    def allgather(self, output_lists, inputs, opts=None):
        works, parts = [], []
        for outs, inp in zip(output_lists, inputs):
            if len(outs) != self.size():
                raise ValueError("hetsync backend: allgather needs %d output tensors, got %d" % (self.size(), len(outs)))
            w, got = self._gather_flat(inp)
            works.append(w)
            parts.append((outs, got))

        def then():
            for outs, got in parts:
                for out, part in zip(outs, got()):
                    out.copy_(part.reshape(out.shape))
        return _handed(_Call(works, then, output_lists), False)

    def _allgather_base(self, output, inp, opts=None):
        if output.numel() != inp.numel() * self.size():
            raise ValueError("hetsync backend: all_gather_into_tensor: output has %d elements, want %d x %d"
                             % (output.numel(), self.size(), inp.numel()))

        def start(out):
            flat = out.reshape(-1)
            n = inp.numel()
            flat[self.rank() * n:(self.rank() + 1) * n].copy_(inp.reshape(-1))
            return self.comm.allgather(out, True)
        return _handed(self._each([output], lambda t: self._contig(t, start), [output]), False)

    def reduce_scatter(self, outputs, input_lists, opts=None):
        op = _reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        starts = [self._reduce_scatter_flat(out, torch.cat([t.reshape(-1) for t in ins]), op)
                  for out, ins in zip(outputs, input_lists)]
        return _handed(_Call([w for w, _ in starts], lambda: [f() for _, f in starts], outputs), False)

    def _reduce_scatter_base(self, output, inp, opts=None):
        op = _reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        w, then = self._reduce_scatter_flat(output, inp.reshape(-1).clone(), op)
        return _handed(_Call([w], then, [output]), False)

    def _reduce_scatter_flat(self, out, flat, op):
        n = out.numel()
        if flat.numel() != n * self.size():
            raise ValueError("hetsync backend: reduce_scatter: input has %d elements, want %d x %d"
                             % (flat.numel(), self.size(), n))
        w = self.comm.reduce_scatter(flat, op, True)
        return w, lambda: out.copy_(flat[self.rank() * n:(self.rank() + 1) * n].reshape(out.shape))

    def alltoall_base(self, output, inp, output_split_sizes, input_split_sizes, opts=None):
        if output_split_sizes or input_split_sizes:
            if len(set(output_split_sizes or [0])) > 1 or len(set(input_split_sizes or [0])) > 1:
                raise ValueError("hetsync backend: all_to_all_single with unequal splits is not supported")
        send = inp.contiguous()
        return _handed(self._each([output], lambda t: self._contig(t, lambda out: self.comm.alltoall(send, out, True)),
                                  [output]), False)

    def alltoall(self, outputs, inputs, opts=None):
        if len({t.numel() for t in inputs + outputs}) > 1:
            raise ValueError("hetsync backend: all_to_all with tensors of unequal sizes is not supported")
        send = torch.cat([t.reshape(-1) for t in inputs])
        recv = torch.empty_like(send)
        w = self.comm.alltoall(send, recv, True)

        def then():
            for out, part in zip(outputs, recv.chunk(len(outputs))):
                out.copy_(part.reshape(out.shape))
        return _handed(_Call([w], then, outputs), False)

    def barrier(self, opts=None):
        return _handed(_Call([self.comm.barrier(True)], None, []), False)

    def send(self, tensors, dst, tag=0):
        return _handed(self._each(tensors, lambda t: self._moved(t, lambda x: self.comm.send(x, dst, True)), tensors), False)

    def recv(self, tensors, src, tag=0):
        return _handed(self._each(tensors, lambda t: self._moved(t, lambda x: self.comm.recv(x, src, True)), tensors), False)


# Comms that the wrapped new_group split on every rank, by their members' global ranks, for
# the creator (which only members reach) to take.
_pending = {}


def _create(opts, pg_options=None):
    ranks = tuple(opts.global_ranks_in_group)
    world = hetsync.init()
    if not ranks:
        if opts.group_size != world.size() or opts.group_rank != world.rank():
            raise HetsyncError("hetsync backend: torch asks for rank %d of %d, but hetsync formed rank %d of %d: "
                               "RANK and WORLD_SIZE must be the ones the launcher gave"
                               % (opts.group_rank, opts.group_size, world.rank(), world.size()))
        return ProcessGroupHetsync(world)
    comm = _pending.pop(ranks, None)
    if comm is None:
        raise HetsyncError("hetsync backend: group %s was not made by torch.distributed.new_group on every rank"
                           % (list(ranks),))
    return ProcessGroupHetsync(comm)


def _wrap_new_group(new_group):
    @functools.wraps(new_group)
    def wrapped(ranks=None, *args, **kwargs):
        backend = kwargs.get("backend") or (args[1] if len(args) > 1 else None)
        default = dist.distributed_c10d._get_default_group() if dist.is_initialized() else None
        ours = isinstance(default, ProcessGroupHetsync) and (backend is None or str(backend).lower() == NAME)
        if ours:
            members = tuple(sorted(ranks)) if ranks is not None else tuple(range(default.size()))
            me = default.rank()
            sub = default.comm.split(0 if me in members else -1, me)
            if sub is not None:
                _pending[members] = sub
        return new_group(ranks, *args, **kwargs)
    wrapped._hetsync_wrapped = True
    return wrapped


def register():
    """Registers the backend and wraps new_group; importing hetsync calls it once."""
    if NAME.upper() in dist.Backend._plugins:
        return
    kwargs = {}
    if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
        # torch 2 asks which devices' tensors a backend takes; GPU tensors are staged through
        # host memory (see _buffers).
        kwargs["devices"] = ["cpu", "cuda"]
    dist.Backend.register_backend(NAME, _create, extended_api=True, **kwargs)
    c10d = dist.distributed_c10d
    if not getattr(c10d.new_group, "_hetsync_wrapped", False):
        c10d.new_group = _wrap_new_group(c10d.new_group)
        dist.new_group = c10d.new_group
