"""The "hetsync" backend's env:// rendezvous uses the job's own store, not torch's TCPStore:
no socket listens on MASTER_PORT and TCPStore is never made. The store's operations across
ranks, a wait that times out naming its key, the torch idioms that use the store (new_group's
store-based barrier on torch 1.13, all_gather_object, barrier), a second process group after
destroy_process_group, one over "hetsync://" explicitly, Gloo over "hetsync://", and Gloo
under `hetsync launch` with torch's own env:// store (MASTER_PORT is free for it)."""

import datetime
import os
import sys

import torch
import torch.distributed as dist

import hetsync

rdv = sys.modules["torch.distributed.rendezvous"]


def listening(port):
    """Whether a socket of this host listens on TCP port (/proc/net/tcp and tcp6: state 0A)."""
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                lines = f.readlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def no_tcpstore(*args, **kwargs):
    raise AssertionError("rank %s: env:// made a TCPStore for the hetsync backend" % os.environ["RANK"])


def check_store(store, rank, size, prefix):
    """set/get/add/wait across ranks through torch's PrefixStore (C++ calling our Store)."""
    # The add first: once every rank's key is set, every rank's add has landed.
    store.add("%s/count" % prefix, rank + 1)
    store.set("%s/key%d" % (prefix, rank), "value %d" % rank)
    keys = ["%s/key%d" % (prefix, r) for r in range(size)]
    store.wait(keys)
    for r in range(size):
        got = store.get(keys[r])
        assert got == b"value %d" % r, (rank, r, got)
    total = size * (size + 1) // 2
    assert store.add("%s/count" % prefix, 0) == total
    assert store.get("%s/count" % prefix) == str(total).encode()


def main():
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    port = int(os.environ["MASTER_PORT"])
    real_tcpstore = rdv.TCPStore
    rdv.TCPStore = no_tcpstore

    dist.init_process_group("hetsync")  # env://, the default
    assert not listening(port), "rank %d: something listens on MASTER_PORT %d" % (rank, port)
    default = dist.distributed_c10d._get_default_store()
    check_store(default, rank, size, "pg1")

    # A wait that times out fails with an error naming the key, and the store goes on.
    try:
        default.wait(["never-set-%d" % rank], datetime.timedelta(milliseconds=300))
        raise AssertionError("rank %d: a wait for a key never set returned" % rank)
    except RuntimeError as e:  # HetsyncError, through torch's C++ as RuntimeError
        assert "never-set-%d" % rank in str(e) and "timeout" in str(e), (rank, str(e))
        print("rank %d: wait timed out: %s" % (rank, str(e).splitlines()[-1]))
    assert default.get("pg1/key0") == b"value 0"

    # The store's own calls (check is not PrefixStore's in torch 1.13).
    own = hetsync.store.job_store("own/")
    own.set("k%d" % rank, b"x")
    own.wait(["k%d" % r for r in range(size)])
    assert own.check(["k%d" % r for r in range(size)]) and not own.check(["absent"])
    won = own.compare_set("winner", "", "rank %d" % rank)
    assert won.startswith(b"rank "), won
    assert own.compare_set("absent", "x", "y") == b"x" and not own.check(["absent"])
    dist.barrier()
    assert own.num_keys() >= size + 1
    if rank == 0:
        assert own.delete_key("winner") and not own.delete_key("winner")

    # The idioms that use the store or the group: new_group (a store-based barrier on torch
    # 1.13), all_gather_object, barrier.
    sub = dist.new_group([0, 1])
    if rank < 2:
        t = torch.tensor([rank + 1.0])
        dist.all_reduce(t, group=sub)
        assert t.item() == 3.0, t
    objs = [None] * size
    dist.all_gather_object(objs, {"rank": rank, "name": "r%d" % rank})
    assert objs == [{"rank": r, "name": "r%d" % r} for r in range(size)], objs
    dist.barrier()
    dist.destroy_process_group()

    # A second group: the explicit "hetsync://", a rendezvous of its own keys.
    dist.init_process_group("hetsync", init_method="hetsync://")
    check_store(dist.distributed_c10d._get_default_store(), rank, size, "pg2")
    t = torch.ones(3) * (rank + 1)
    dist.all_reduce(t)
    assert t.tolist() == [size * (size + 1) / 2] * 3, t
    dist.destroy_process_group()

    # Gloo over the job's store: its own rendezvous (every rank's address) runs on it.
    dist.init_process_group("gloo", init_method="hetsync://")
    assert not listening(port), "rank %d: something listens on MASTER_PORT %d" % (rank, port)
    t = torch.ones(2) * (rank + 1)
    dist.all_reduce(t)
    assert t.tolist() == [size * (size + 1) / 2] * 2, t
    dist.destroy_process_group()

    # Gloo keeps torch's own env:// store, on MASTER_PORT, which hetsync leaves free.
    rdv.TCPStore = real_tcpstore
    dist.init_process_group("gloo")
    if rank == 0:
        assert listening(port), "rank 0: Gloo's TCPStore does not listen on MASTER_PORT %d" % port
    t = torch.ones(4) * (rank + 1)
    dist.all_reduce(t)
    assert t.tolist() == [size * (size + 1) / 2] * 4, t
    dist.destroy_process_group()
    print("rank %d: store ok" % rank)


if __name__ == "__main__":
    main()
