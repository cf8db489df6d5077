"""Checks every collective of a Comm, every dtype hetsync reduces and torch tensors and numpy
arrays, against a reference that torch computes from all ranks' inputs (which every rank can
rebuild: they are a function of the rank). Torch tensors live on $HETSYNC_TEST_DEVICE (cpu unless
set, cuda on a GPU machine: hetsync stages GPU tensors through host memory)."""

import os

import numpy as np
import torch

import hetsync

DTYPES = (torch.float32, torch.float64, torch.int32, torch.int64)
OPS = ("sum", "avg", "min", "max", "prod")
DEVICE = torch.device(os.environ.get("HETSYNC_TEST_DEVICE", "cpu"))


def contribution(rank, n, dtype):
    # Small integers: sums and products are exact in every dtype, so floats compare exactly too.
    x = (torch.arange(n, dtype=torch.int64) * 7 + rank * 3) % 5 + 1
    if rank % 2:
        x = -x
    return x.to(dtype)


def reference(parts, op, p):
    s = torch.stack(parts)
    if op == "sum":
        return s.sum(0)
    if op == "avg":
        tot = s.sum(0)
        if tot.dtype.is_floating_point:
            return tot * (1.0 / p)
        return torch.div(tot, p, rounding_mode="trunc")
    if op == "min":
        return s.min(0).values
    if op == "max":
        return s.max(0).values
    return s.prod(0)


def same(got, want, what):
    got = torch.as_tensor(got).cpu()
    if want.dtype.is_floating_point:
        ok = torch.allclose(got, want, rtol=1e-6, atol=0)
    else:
        ok = torch.equal(got, want)
    if not ok:
        raise AssertionError("%s: got %s, want %s" % (what, got.tolist(), want.tolist()))


def as_kind(t, kind):
    """t as the kind of buffer a collective gets: a numpy array sharing t's memory, or a torch
    tensor on DEVICE (t itself on the CPU)."""
    return t.numpy() if kind == "numpy" else t.to(DEVICE)


def check_comm(comm, label):
    r, p = comm.rank(), comm.size()
    n = 7
    for kind in ("torch", "numpy"):
        for dt in DTYPES:
            for op in OPS:
                what = "%s %s %s %s" % (label, kind, dt, op)
                x = as_kind(contribution(r, n, dt), kind)
                comm.allreduce(x, op)
                same(x, reference([contribution(i, n, dt) for i in range(p)], op, p), "allreduce " + what)

                m = 3
                x = as_kind(contribution(r, m * p, dt), kind)
                comm.reduce_scatter(x, op)
                want = reference([contribution(i, m * p, dt) for i in range(p)], op, p)
                same(x[r * m:(r + 1) * m], want[r * m:(r + 1) * m], "reduce_scatter " + what)

                root = p - 1
                x = as_kind(contribution(r, n, dt), kind)
                comm.reduce(x, root, op)
                if r == root:
                    same(x, reference([contribution(i, n, dt) for i in range(p)], op, p), "reduce " + what)

            what = "%s %s %s" % (label, kind, dt)
            x = as_kind(contribution(r, n, dt), kind)
            comm.broadcast(x, root=0)
            same(x, contribution(0, n, dt), "broadcast " + what)

            m = 3
            x = torch.zeros(m * p, dtype=dt)
            x[r * m:(r + 1) * m] = contribution(r, m, dt)
            x = as_kind(x, kind)
            comm.allgather(x)
            same(x, torch.cat([contribution(i, m, dt) for i in range(p)]), "allgather " + what)

            send = torch.cat([contribution(r * p + j, 2, dt) for j in range(p)])
            send, recv = as_kind(send, kind), as_kind(torch.zeros_like(send), kind)
            comm.alltoall(send, recv)
            same(recv, torch.cat([contribution(i * p + r, 2, dt) for i in range(p)]), "alltoall " + what)

            if p > 1:
                x = as_kind(contribution(r, n, dt), kind)
                y = as_kind(torch.zeros(n, dtype=dt), kind)
                w = comm.send(x, (r + 1) % p, async_op=True)
                comm.recv(y, (r - 1) % p)
                w.wait()
                same(y, contribution((r - 1) % p, n, dt), "send/recv " + what)

    # Types hetsync does not reduce travel through the collectives that only move data.
    h = torch.full((6,), float(r), dtype=torch.float16, device=DEVICE)
    comm.broadcast(h, root=p - 1)
    same(h.float(), torch.full((6,), float(p - 1)), "broadcast float16 " + label)
    b = torch.zeros(4 * p, dtype=torch.uint8, device=DEVICE)
    b[4 * r:4 * (r + 1)] = r + 1
    comm.allgather(b)
    same(b, torch.arange(1, p + 1, dtype=torch.uint8).repeat_interleave(4), "allgather uint8 " + label)

    # Non-blocking forms keep their tensors alive: the Work holds them.
    works, xs = [], []
    for i in range(4):
        x = as_kind(contribution(r, 5, torch.float32), "torch")
        xs.append(x)
        works.append(comm.allreduce(x, "sum", async_op=True))
    works.append(comm.barrier(async_op=True))
    for w in works:
        w.wait()
    for x in xs:
        same(x, reference([contribution(i, 5, torch.float32) for i in range(p)], "sum", p), "async allreduce " + label)

    # A large buffer, through the transport's segments and chunks.
    big = torch.full((1 << 20,), float(r + 1), device=DEVICE)
    comm.allreduce(big)
    same(big[:3], torch.full((3,), float(p * (p + 1) // 2)), "allreduce 4 MiB " + label)

    comm.barrier()


def check_errors(comm):
    r = comm.rank()
    for bad, exc, words in (
            (lambda: comm.allreduce(torch.zeros(3, dtype=torch.float16)), TypeError, "float16"),
            (lambda: comm.allreduce(torch.zeros(4, 4).t()), ValueError, "not contiguous"),
            (lambda: comm.allreduce(np.zeros((4, 4))[:, 1]), ValueError, "not C-contiguous"),
            (lambda: comm.allreduce([1.0]), TypeError, "torch.Tensor or a numpy.ndarray"),
            (lambda: comm.allreduce(torch.zeros(3), op="xor"), ValueError, "xor"),
            (lambda: comm.broadcast(torch.zeros(3), root=comm.size()), hetsync.HetsyncError, "rank %d" % r)):
        try:
            bad()
        except exc as e:
            if words not in str(e):
                raise AssertionError("error %r does not name %r" % (str(e), words))
        else:
            raise AssertionError("no %s for %s" % (exc.__name__, words))
