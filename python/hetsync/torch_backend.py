"""The torch.distributed backend "hetsync": a ProcessGroup whose collectives run on hetsync.

    import hetsync, torch.distributed as dist
    dist.init_process_group("hetsync")        # env://, under `hetsync launch`

The default group is the job's Comm (hetsync.init). torch.distributed.new_group makes its group
with Comm.split: split is a call every rank of the job makes, while torch asks only the new
group's members to create it, so register() wraps new_group to split on every rank first (and
changes nothing while the default group runs another backend).

The calls complete before they return: the Work handed to torch (and to DDP's reducer) is
already done, its future already set.
"""

import functools

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup, _create_work_from_future

import hetsync
from ._abi import HetsyncError

NAME = "hetsync"


def _reduce_op(op):
    for torch_op, name in ((dist.ReduceOp.SUM, "sum"), (dist.ReduceOp.AVG, "avg"), (dist.ReduceOp.MIN, "min"),
                           (dist.ReduceOp.MAX, "max"), (dist.ReduceOp.PRODUCT, "prod")):
        if op == torch_op:
            return name
    raise ValueError("hetsync backend: reduction %s is not supported: SUM, AVG, MIN, MAX or PRODUCT" % (op,))


def _done(result):
    """A completed call as torch's Work. A Work that C++ waits on (DDP's reducer,
    _verify_params_across_processes) must be one C++ knows complete: a Python subclass of Work
    is not (its wait would block forever), while one made from a completed future is."""
    f = torch.futures.Future()
    f.set_result(result)
    return _create_work_from_future(f)


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
        """Runs fn on t, through a contiguous copy when t is not contiguous."""
        if t.is_contiguous():
            fn(t)
        else:
            c = t.contiguous()
            fn(c)
            t.copy_(c)

    def _moved(self, t, fn):
        """Runs fn, a call that only moves data, on t; when t's bytes are not whole 4-byte words
        (a uint8 tensor of any length, as broadcast_object_list sends), on a padded copy."""
        nbytes = t.numel() * t.element_size()
        if nbytes % 4 == 0:
            self._contig(t, fn)
            return
        words = torch.zeros((nbytes + 3) // 4, dtype=torch.int32)
        raw = words.view(torch.uint8)[:nbytes]
        raw.copy_(t.detach().reshape(-1).cpu().contiguous().view(torch.uint8))
        fn(words)
        t.copy_(raw.view(t.dtype).reshape(t.shape))

    def allreduce(self, tensors, opts=None):
        op = _reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        for t in tensors:
            self._contig(t, lambda x: self.comm.allreduce(x, op))
        return _done(tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def reduce(self, tensors, opts):
        op = _reduce_op(opts.reduceOp)
        t = _one(tensors, "reduce")
        self._contig(t, lambda x: self.comm.reduce(x, opts.rootRank, op))
        return _done(tensors)

    def broadcast(self, tensors, opts):
        for t in tensors:
            self._moved(t, lambda x: self.comm.broadcast(x, opts.rootRank))
        return _done(tensors)

    def _gather_flat(self, inp):
        """Every rank's inp gathered into one flat tensor of size() padded slots: the slots are
        whole 8-byte words, so any dtype and length gather at word boundaries."""
        p = self.size()
        nbytes = inp.numel() * inp.element_size()
        words = (nbytes + 7) // 8
        flat = torch.zeros(p * words, dtype=torch.int64)
        slot = flat[self.rank() * words:(self.rank() + 1) * words].view(torch.uint8)[:nbytes]
        slot.copy_(inp.detach().reshape(-1).cpu().contiguous().view(torch.uint8))
        self.comm.allgather(flat)
        return [flat[r * words:(r + 1) * words].view(torch.uint8)[:nbytes].view(inp.dtype) for r in range(p)]

    def allgather(self, output_lists, inputs, opts=None):
        for outs, inp in zip(output_lists, inputs):
            if len(outs) != self.size():
                raise ValueError("hetsync backend: allgather needs %d output tensors, got %d" % (self.size(), len(outs)))
            for out, part in zip(outs, self._gather_flat(inp)):
                out.copy_(part.reshape(out.shape))
        return _done(output_lists)

    def _allgather_base(self, output, inp, opts=None):
        if output.numel() != inp.numel() * self.size():
            raise ValueError("hetsync backend: all_gather_into_tensor: output has %d elements, want %d x %d"
                             % (output.numel(), self.size(), inp.numel()))

        def run(out):
            flat = out.reshape(-1)
            n = inp.numel()
            flat[self.rank() * n:(self.rank() + 1) * n].copy_(inp.reshape(-1))
            self.comm.allgather(out)
        self._contig(output, run)
        return _done([output])

    def reduce_scatter(self, outputs, input_lists, opts=None):
        op = _reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        for out, ins in zip(outputs, input_lists):
            flat = torch.cat([t.reshape(-1) for t in ins])
            self._reduce_scatter_flat(out, flat, op)
        return _done(outputs)

    def _reduce_scatter_base(self, output, inp, opts=None):
        op = _reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        self._reduce_scatter_flat(output, inp.reshape(-1).clone(), op)
        return _done([output])

    def _reduce_scatter_flat(self, out, flat, op):
        n = out.numel()
        if flat.numel() != n * self.size():
            raise ValueError("hetsync backend: reduce_scatter: input has %d elements, want %d x %d"
                             % (flat.numel(), self.size(), n))
        self.comm.reduce_scatter(flat, op)
        out.copy_(flat[self.rank() * n:(self.rank() + 1) * n].reshape(out.shape))

    def alltoall_base(self, output, inp, output_split_sizes, input_split_sizes, opts=None):
        if output_split_sizes or input_split_sizes:
            if len(set(output_split_sizes or [0])) > 1 or len(set(input_split_sizes or [0])) > 1:
                raise ValueError("hetsync backend: all_to_all_single with unequal splits is not supported")
        send = inp.contiguous()
        self._contig(output, lambda out: self.comm.alltoall(send, out))
        return _done([output])

    def alltoall(self, outputs, inputs, opts=None):
        if len({t.numel() for t in inputs + outputs}) > 1:
            raise ValueError("hetsync backend: all_to_all with tensors of unequal sizes is not supported")
        send = torch.cat([t.reshape(-1) for t in inputs])
        recv = torch.empty_like(send)
        self.comm.alltoall(send, recv)
        for out, part in zip(outputs, recv.chunk(len(outputs))):
            out.copy_(part.reshape(out.shape))
        return _done(outputs)

    def barrier(self, opts=None):
        self.comm.barrier()
        return _done([])

    def send(self, tensors, dst, tag=0):
        for t in tensors:
            self._moved(t, lambda x: self.comm.send(x, dst))
        return _done(tensors)

    def recv(self, tensors, src, tag=0):
        for t in tensors:
            self._moved(t, lambda x: self.comm.recv(x, src))
        return _done(tensors)


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
    dist.Backend.register_backend(NAME, _create, extended_api=True)
    c10d = dist.distributed_c10d
    if not getattr(c10d.new_group, "_hetsync_wrapped", False):
        c10d.new_group = _wrap_new_group(c10d.new_group)
        dist.new_group = c10d.new_group
