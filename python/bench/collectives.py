"""Collectives on torch tensors: torch.distributed's hetsync backend against Gloo in the same
run (the same ranks, tensors and calls), and the Python layer's cost per call. A benchmark,
not a test:

    PYTHONPATH=python bin/hetsync launch -np 4 -- /usr/bin/python3 python/bench/collectives.py

Rank 0 prints one row per size: the mean time of one allreduce (sum, float32) and its bus
bandwidth, 2(p-1)/p x bytes / time as nccl-tests count it, for each backend.
"""

import argparse
import threading
import time

import torch
import torch.distributed as dist

import hetsync


def timed(fn, iters, warmup):
    dist.barrier()
    return timed_local(fn, iters, warmup)


def timed_local(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-bytes", type=int, default=4 << 10)
    ap.add_argument("--max-bytes", type=int, default=64 << 20)
    ap.add_argument("--factor", type=int, default=4)
    ap.add_argument("--budget-bytes", type=int, default=256 << 20, help="bytes reduced per size and backend")
    args = ap.parse_args()

    dist.init_process_group("hetsync")
    gloo = dist.new_group(backend="gloo")
    rank, p = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print("# hetsync: %s" % hetsync.world().settings())
        print("%10s %12s %12s %12s %12s %8s" % ("bytes", "hetsync us", "busbw GB/s", "gloo us", "busbw GB/s", "ratio"))
    size = args.min_bytes
    while size <= args.max_bytes:
        t = torch.ones(size // 4)
        iters = max(3, min(200, args.budget_bytes // size))
        th = timed(lambda: dist.all_reduce(t), iters, 2)
        tg = timed(lambda: dist.all_reduce(t, group=gloo), iters, 2)
        bus = 2 * (p - 1) / p * size / 1e9
        if rank == 0:
            print("%10d %12.1f %12.3f %12.1f %12.3f %8.2f" % (size, th * 1e6, bus / th, tg * 1e6, bus / tg, tg / th), flush=True)
        size *= args.factor

    # The Python layer's own cost: a call on a communicator of one rank, where Go has nothing to
    # exchange, through the package (tensor checks, the C call, the wait) and, for comparison,
    # through torch.distributed's backend on top of it.
    alone = hetsync.world().split(rank)
    x = torch.ones(1)
    n = 20000
    per = timed(lambda: alone.allreduce(x), n, 100)
    per_async = timed(lambda: alone.allreduce(x, async_op=True).wait(), n, 100)
    # The C ABI alone, the call run on the calling thread (wait_ms -1): what remains is the
    # Python package's checks and its wait, which returns to Python between slices.
    lib, ptr = hetsync._abi.lib, x.data_ptr()
    per_abi = timed(lambda: lib.hs_allreduce(alone._id, ptr, 1, hetsync._abi.FLOAT32, hetsync._abi.SUM, -1, None), n, 100)
    # Off the main thread the package runs the call on the calling thread.
    got = []
    th = threading.Thread(target=lambda: got.append(timed_local(lambda: alone.allreduce(x), n, 100)))
    th.start()
    th.join()
    # Through torch.distributed: dist.all_reduce on a group of this rank alone (new_group is
    # collective, so every rank makes every rank's group).
    mine = [dist.new_group([r]) for r in range(p)][rank]
    per_dist = timed_local(lambda: dist.all_reduce(x, group=mine), n, 100)
    if rank == 0:
        print("per call on a 1-rank comm, 4 bytes: hetsync.allreduce %.1f us (main thread), %.1f us (other thread), "
              "async_op=True + wait %.1f us, C ABI on the calling thread %.1f us, dist.all_reduce %.1f us"
              % (per * 1e6, got[0] * 1e6, per_async * 1e6, per_abi * 1e6, per_dist * 1e6))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
