"""A torch model trained with hetsync.Session under ssgd, esync and wbsp on every rank: the
loss falls, every rank ends with bitwise-identical parameters, the job stops after the same
round everywhere, and a strategy without a step-by-step form is refused by name."""

import sys

import torch
import torch.nn.functional as F

import hetsync


def model(seed):
    torch.manual_seed(seed)  # different on every rank: the session starts all from rank 0's
    return torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def data(rank):
    g = torch.Generator().manual_seed(100 + rank)
    w = torch.arange(36, dtype=torch.float32).reshape(12, 3) / 36
    x = torch.randn(512, 12, generator=g)
    return x, (x @ w).argmax(1)


def train(sync, rank, **extra):
    net = model(rank)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = data(rank)
    sess = hetsync.Session(net.parameters(), sync=sync, lr=0.1, batch=32, max_rounds=40, **extra)
    losses, rounds, step = [], 0, 0
    while True:
        i = (step * 32) % 512
        xb, yb = x[i:i + 32], y[i:i + 32]
        step += 1
        loss = F.cross_entropy(net(xb), yb)
        opt.zero_grad()
        loss.backward()
        if sess.exchanges_params:
            opt.step()
        losses.append(loss.item())
        if sess.step(loss.item(), len(xb)):
            r = sess.sync()
            rounds += 1
            if not sess.exchanges_params:
                opt.step()
            if r.stop:
                break
    sess.close()
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    ref = flat.clone()
    hetsync.broadcast(ref, root=0)
    assert torch.equal(flat, ref), "rank %d: %s replicas differ from rank 0's by %g" % (
        rank, sync, (flat - ref).abs().max())
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first, "rank %d: %s loss did not fall: %.3f -> %.3f" % (rank, sync, first, last)
    n = torch.tensor([rounds], dtype=torch.int64)
    hetsync.allreduce(n, op="max")
    assert n.item() == rounds, "rank %d: %s stopped after round %d, another rank after %d" % (rank, sync, rounds, n.item())
    print("rank %d: %s ok: %d rounds, %d steps, loss %.3f -> %.3f" % (rank, sync, rounds, step, first, last), flush=True)


def main():
    hetsync.init()
    rank = hetsync.rank()
    train("ssgd", rank)
    train("esync", rank)
    train("wbsp", rank, collective="ring")
    try:
        hetsync.Session(model(0).parameters(), sync="asgd", lr=0.1, batch=32, max_rounds=5)
        sys.exit("rank %d: asgd was not refused" % rank)
    except hetsync.HetsyncError as e:
        assert "cannot be driven by a caller's loop" in str(e), e
        print("rank %d: asgd refused: %s" % (rank, e), flush=True)
    try:
        hetsync.Session(model(0).parameters(), sync="ssgd", lr=0.1, batch=32, bogus=1)
        sys.exit("rank %d: an unknown setting was accepted" % rank)
    except hetsync.HetsyncError as e:
        assert "--bogus" in str(e), e
    print("session ok", flush=True)
    hetsync.finalize()


main()
