"""Session runs that write run directories, launched as `hetsync launch --out RUN_A -- pyrun.py
RUN_B`: an esync session with a slowdown writes RUN_A (the launcher's run directory) with rank
0's evaluations; a second session given no directory of its own is refused on every rank,
since RUN_A already holds a run; network stragglers are refused over auto (which may not
send messages at all); an ssgd session over ring with a step sleep and a network straggler
writes RUN_B (its out= setting). test_pyrun.py reads what they wrote."""

import sys

import torch
import torch.nn.functional as F

import hetsync


def data(seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.arange(24, dtype=torch.float32).reshape(8, 3) / 24
    x = torch.randn(256, 8, generator=g)
    return x, (x @ w).argmax(1)


def train(rank, evaluate, **settings):
    torch.manual_seed(rank)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = data(10 + rank)
    tx, ty = data(99)
    sess = hetsync.Session(net.parameters(), lr=0.1, batch=16, **settings)
    step = rounds = 0
    while True:
        i = (step * 16) % len(x)
        step += 1
        out = net(x[i:i + 16])
        loss = F.cross_entropy(out, y[i:i + 16])
        opt.zero_grad()
        loss.backward()
        if sess.exchanges_params:
            opt.step()
        correct = (out.argmax(1) == y[i:i + 16]).sum().item()
        if not sess.step(loss.item(), 16, correct):
            continue
        r = sess.sync()
        rounds += 1
        if not sess.exchanges_params:
            opt.step()
        if evaluate:
            with torch.no_grad():
                out = net(tx)
                acc = (out.argmax(1) == ty).float().mean().item()
            try:
                sess.record_eval(acc, F.cross_entropy(out, ty).item())
                assert rank == 0, "rank %d: an evaluation was recorded" % rank
            except hetsync.HetsyncError as e:
                assert rank != 0 and "evaluations are rank 0's" in str(e), e
        if r.stop:
            break
    sess.close()
    print("rank %d: %s ok: %d rounds, %d steps" % (rank, settings["sync"], rounds, step), flush=True)


def main():
    hetsync.init()
    rank = hetsync.rank()
    train(rank, True, sync="esync", max_rounds=8, slowdown=[1, 1, 3], slowdown_base="3ms")
    try:
        hetsync.Session(torch.nn.Linear(2, 2).parameters(), sync="ssgd", lr=0.1, batch=16, max_rounds=2)
        sys.exit("rank %d: a second session into the launcher's run directory was not refused" % rank)
    except hetsync.HetsyncError as e:
        want = "already holds a run" if rank == 0 else "rank 0 cannot write the run directory"
        assert want in str(e), e
        print("rank %d: refused: %s" % (rank, e), flush=True)
    straggler = "ranks=1;delay=25ms;at=0s;for=1h;mode=network"
    try:
        hetsync.Session(torch.nn.Linear(2, 2).parameters(), sync="ssgd", lr=0.1, batch=16, stragglers=straggler)
        sys.exit("rank %d: network stragglers over auto were not refused" % rank)
    except hetsync.HetsyncError as e:
        assert 'name one (collective="ring")' in str(e), e
    train(rank, False, sync="ssgd", max_rounds=5, out=sys.argv[1], step_sleep=[0, 0, 4], stragglers=straggler,
          collective="ring")
    hetsync.finalize()


main()
