"""A torch model trained with hetsync.Session under every built-in strategy, one after another
on every rank, each with the program's own loop and optimizer stepped where the session's
exchange says: the loss falls under every one; the strategies that keep identical replicas
(SSGD, ESync, WBSP and WBSP-optimized over an allreduce, local SGD, Sync-Switch, which gathers
the server's model when it stops) end with bitwise-identical parameters, and the synchronous
ones stop after the same round everywhere; under WBSP over an allreduce every local step's
change reaches the global model exactly once; a configuration without a step-by-step form is
refused by name."""

import sys

import torch
import torch.nn.functional as F

import hetsync

# (label, sync, settings, identical replicas, same rounds on every rank)
STRATEGIES = [
    ("ssgd", "ssgd", {}, True, True),
    ("esync", "esync", {}, True, True),
    ("wbsp", "wbsp", {"collective": "ring"}, True, True),
    ("local-sgd", "wbsp", {"collective": "ring", "wbsp_period": 4}, True, True),
    ("wbsp-opt", "wbsp-opt", {"collective": "ring"}, True, True),
    ("sync-switch", "sync-switch", {"collective": "ring", "switch_at": 0.5, "straggler_policy": "none"}, True, False),
    ("wbsp-ps", "wbsp", {"collective": "ps"}, False, False),
    ("wbsp-opt-ps", "wbsp-opt", {"collective": "ps"}, False, False),
    ("asgd", "asgd", {"collective": "ps"}, False, False),
    ("dcasgd", "dcasgd", {"collective": "ps"}, False, False),
    ("ssp", "ssp", {"collective": "ps", "staleness": 2}, False, False),
    ("ssp-lazy", "ssp", {"collective": "ps", "staleness": 2, "ssp_pull": "lazy"}, False, False),
    ("local", "local", {}, False, False),
]


# WBSP over an allreduce (local SGD included) adds every local step's change to the global
# model exactly once: the final model is the first plus the ranks' summed changes over N.
EVERY_STEP_ONCE = ("wbsp", "local-sgd", "wbsp-opt")


def model(seed):
    torch.manual_seed(seed)  # different on every rank: the session starts all from rank 0's
    return torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def data(rank):
    g = torch.Generator().manual_seed(100 + rank)
    w = torch.arange(36, dtype=torch.float32).reshape(12, 3) / 36
    x = torch.randn(512, 12, generator=g)
    return x, (x @ w).argmax(1)


def flat_params(net):
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def train(label, sync, rank, identical, same_rounds, **extra):
    net = model(rank)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = data(rank)
    sess = hetsync.Session(net.parameters(), sync=sync, lr=0.1, batch=32, max_rounds=40, **extra)
    start = flat_params(net)  # rank 0's, on every rank
    moved = torch.zeros_like(start, dtype=torch.float64)  # this rank's optimizer steps, summed
    losses, rounds, step, kinds = [], 0, 0, set()
    while True:
        i = (step * 32) % 512
        xb, yb = x[i:i + 32], y[i:i + 32]
        step += 1
        loss = F.cross_entropy(net(xb), yb)
        opt.zero_grad()
        loss.backward()
        ex = sess.exchange
        kinds.add(ex)
        if ex == "parameters":
            before = flat_params(net)
            opt.step()
            moved += (flat_params(net) - before).double()
        losses.append(loss.item())
        if sess.step(loss.item(), len(xb)):
            r = sess.sync()
            rounds += 1
            if r.exchange == "gradients":
                opt.step()
            if r.stop:
                break
    sess.close()
    flat = flat_params(net)
    if label in EVERY_STEP_ONCE:
        # A step lost (its change never sent) or counted twice would show here: wbsp-opt's
        # steps between rounds reach the library only through step()'s parameter copies.
        hetsync.allreduce(moved)
        want = start.double() + moved / hetsync.size()
        assert torch.allclose(flat.double(), want, atol=1e-4), "rank %d: %s's model is %g from the start plus every step's change" % (
            rank, label, (flat.double() - want).abs().max())
    if identical:
        ref = flat.clone()
        hetsync.broadcast(ref, root=0)
        assert torch.equal(flat, ref), "rank %d: %s replicas differ from rank 0's by %g" % (
            rank, label, (flat - ref).abs().max())
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    # local: the ranks other than 0 train alone until rank 0's stop reaches them, however
    # few steps that is; rank 0's model is the one a local run evaluates.
    if sync != "local" or rank == 0:
        assert last < first, "rank %d: %s loss did not fall: %.3f -> %.3f" % (rank, label, first, last)
    if same_rounds:
        n = torch.tensor([rounds], dtype=torch.int64)
        hetsync.allreduce(n, op="max")
        assert n.item() == rounds, "rank %d: %s stopped after round %d, another rank after %d" % (
            rank, label, rounds, n.item())
    print("rank %d: %s ok: %d rounds, %d steps, exchange %s, loss %.3f -> %.3f"
          % (rank, label, rounds, step, "+".join(sorted(kinds)), first, last), flush=True)
    # The next strategy's session starts when every rank has finished this one's checks.
    hetsync.barrier()


def main():
    hetsync.init()
    rank = hetsync.rank()
    for label, sync, extra, identical, same_rounds in STRATEGIES:
        train(label, sync, rank, identical, same_rounds, **extra)
    try:
        hetsync.Session(model(0).parameters(), sync="esync", esync_queries="nonblocking", lr=0.1, batch=32, max_rounds=5)
        sys.exit("rank %d: esync's non-blocking queries were not refused" % rank)
    except hetsync.HetsyncError as e:
        assert "cannot be driven by a caller's loop" in str(e), e
        print("rank %d: esync nonblocking refused: %s" % (rank, e), flush=True)
    try:
        hetsync.Session(model(0).parameters(), sync="ssgd", lr=0.1, batch=32, bogus=1)
        sys.exit("rank %d: an unknown setting was accepted" % rank)
    except hetsync.HetsyncError as e:
        assert "--bogus" in str(e), e
    print("session ok", flush=True)
    hetsync.finalize()


main()
