"""The torch backend's calls are asynchronous, on both of its paths: a call from
torch.distributed's Python functions (a Work whose wait() waits) and a call from C++ (DDP's
reducer: a Work over a future that the group's waiter thread completes). Rank 1 enters each
call only once rank 0 has seen its own still in flight, so an answer that is already complete
when the call returns fails the test (a blocking call never returns: rank 1 waits for rank 0).
Errors reach both paths with hetsync's message: HetsyncError on the Python path, torch's
RuntimeError carrying it on the C++ path (torch 1.13 wraps a future's error)."""

import os
import sys
import threading

import torch
import torch.distributed as dist

import hetsync

mark = sys.argv[1]


def in_turn(name, call, check):
    """call() on rank 0 first: rank 1 makes its own only once rank 0 has checked that its call
    returned still in flight (check, on rank 0's Work). Returns call()'s Work."""
    path = "%s.%s" % (mark, name)
    if dist.get_rank() == 0:
        w = call()
        check(w)
        open(path, "w").close()
        return w
    while not os.path.exists(path):
        threading.Event().wait(0.01)
    return call()


def main():
    dist.init_process_group("hetsync")
    rank = dist.get_rank()
    pg = dist.distributed_c10d._get_default_group()

    # torch.distributed's path: dist.all_reduce(async_op=True) returns before the call completes.
    t = torch.full((1000,), float(rank + 1))

    def in_flight(w):
        assert not w.is_completed(), "rank 0: all_reduce(async_op=True) completed before rank 1 called it"
    w = in_turn("python", lambda: dist.all_reduce(t, async_op=True), in_flight)
    w.wait()
    assert torch.equal(t, torch.full((1000,), 3.0)), t[:4]

    # The C++ path (what DDP's reducer calls): a Work over a future, completed by the waiter.
    t = torch.full((1000,), float(rank + 1))

    def future_pending(w):
        assert not w.get_future().done(), "rank 0: the reducer's allreduce completed before rank 1 called it"
    w = in_turn("cxx", lambda: pg.allreduce([t]), future_pending)
    got = w.get_future().wait()
    assert torch.equal(got[0], torch.full((1000,), 3.0)) and got[0] is t, got

    # Errors: rank 0 reduces where rank 1 broadcasts. Each path raises hetsync's message.
    a = dist.new_group([0, 1])
    b = dist.new_group([0, 1])
    x = torch.ones(4)
    try:
        if rank == 0:
            a.allreduce([x]).get_future().wait()
        else:
            # The C++ path completes the calls other than allreduce before they return, so
            # that a C++ wait(), which ignores a future's error, never drops one.
            a.broadcast([x], dist.BroadcastOptions())
        raise AssertionError("rank %d: the mismatched call on the C++ path did not fail" % rank)
    except hetsync.HetsyncError as e:
        print("rank %d: c++ path: HetsyncError: %s" % (rank, e), flush=True)
    except RuntimeError as e:
        # The future's error as C++ holds it: torch wraps it, with hetsync's message.
        if "HetsyncError" not in str(e) or "called AllReduce" not in str(e):
            raise
        print("rank %d: c++ path: HetsyncError: %s" % (rank, e), flush=True)
    try:
        if rank == 0:
            dist.all_reduce(x, group=b)
        else:
            dist.broadcast(x, 0, group=b)
        raise AssertionError("rank %d: the mismatched call on torch's path did not fail" % rank)
    except hetsync.HetsyncError as e:
        print("rank %d: python path: HetsyncError: %s" % (rank, e), flush=True)
    print("backend async ok", rank, flush=True)


if __name__ == "__main__":
    main()
