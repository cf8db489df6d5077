"""DDP on the hetsync backend, with torch's env:// and no Gloo: replicas stay bitwise identical
and match one process that trains on every rank's batches. Also: new_group, all_gather_object,
a DataLoader whose workers are forked after the job formed, and the refusals of a forked child
that calls hetsync and of a spawned child that would join as its parent's rank. The model and
batches live on $HETSYNC_TEST_DEVICE (cpu unless set; cuda on a GPU machine)."""

import multiprocessing as mp
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

import hetsync
from check import DEVICE

STEPS, BATCH, FEATURES = 5, 8, 6


def model():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 3)).double().to(DEVICE)


def batches(rank, size):
    """Every rank's batch of each step, the same on every rank (a fixed seed)."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(STEPS, size, BATCH, FEATURES, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (STEPS, size, BATCH), generator=g)
    return x, y


def forked_call(q):
    try:
        hetsync.allreduce(torch.ones(1))
        q.put("called")
    except hetsync.HetsyncError as e:
        q.put("refused: " + str(e))


def spawned_init(q):
    try:
        hetsync.init()
        q.put("joined")
    except hetsync.HetsyncError as e:
        q.put("refused: " + str(e))


def main():
    dist.init_process_group("hetsync")
    rank, size = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "hetsync", dist.get_backend()
    assert isinstance(dist.distributed_c10d._get_default_group(), hetsync.torch_backend.ProcessGroupHetsync)

    x, y = batches(rank, size)
    # The DataLoader's workers are forked now that the job has formed: they must neither hang
    # nor disturb it.
    loader = DataLoader(TensorDataset(x[:, rank], y[:, rank]), batch_size=None, num_workers=2)
    net = DDP(model(), device_ids=[DEVICE] if DEVICE.type == "cuda" else None)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for xb, yb in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(net(xb.to(DEVICE)), yb.to(DEVICE)).backward()
        opt.step()

    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()]).cpu()
    every = [None] * size
    dist.all_gather_object(every, flat.numpy().tobytes())
    assert all(b == every[0] for b in every), "rank %d: replicas differ after %d steps" % (rank, STEPS)
    objs = ["from rank %d" % rank, {"odd": b"xyz"}]
    dist.broadcast_object_list(objs, src=size - 1)
    assert objs == ["from rank %d" % (size - 1), {"odd": b"xyz"}], objs

    # One process training on every rank's batches: the mean loss over them all is the mean of
    # the ranks' means (equal batches), whose gradient DDP averages.
    ref = model()
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for s in range(STEPS):
        ropt.zero_grad()
        nn.functional.cross_entropy(ref(x[s].reshape(-1, FEATURES).to(DEVICE)), y[s].reshape(-1).to(DEVICE)).backward()
        ropt.step()
    want = torch.cat([p.detach().reshape(-1) for p in ref.parameters()]).cpu()
    assert torch.allclose(flat, want, rtol=1e-9, atol=1e-12), (flat - want).abs().max()

    # new_group is hetsync's split; the other ranks take part in it too.
    group = dist.new_group([0, size - 1])
    t = torch.tensor([float(rank)], device=DEVICE)
    if rank in (0, size - 1):
        dist.all_reduce(t, group=group)
        assert t.item() == size - 1, t
    for name, fn in (("forked", forked_call), ("spawned", spawned_init)):
        ctx = mp.get_context("fork" if name == "forked" else "spawn")
        q = ctx.Queue()
        p = ctx.Process(target=fn, args=(q,))
        p.start()
        got = q.get()
        p.join()
        want = "a child forked from the rank's process" if name == "forked" else "cannot join as its parent's rank"
        assert got.startswith("refused") and want in got, "rank %d: %s child: %s" % (rank, name, got)
        print("rank %d: %s child %s" % (rank, name, got.split(":")[0]))
    dist.barrier()
    dist.destroy_process_group()
    print("ddp ok", rank)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
