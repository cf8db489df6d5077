"""A torch model trained with a hetsync strategy from the program's own loop (hetsync.Session):
an MLP on Fashion-MNIST, each rank a device of its own speed (--slowdown), until the global
model reaches --target on the test set. Run it once per strategy and compare the times:

    hetsync launch -np 4 -- /usr/bin/python3 examples/torch/esync_vs_ssgd.py --sync ssgd
    hetsync launch -np 4 -- /usr/bin/python3 examples/torch/esync_vs_ssgd.py --sync esync

Every rank pads each local step to its factor × --slowdown-base (8 ms: the devices' speeds are
fixed, whatever the host's other ranks do), as `hetsync train --slowdown-base` does. Rank 0
evaluates the global model every --eval-every seconds of training on the first 2,000 test
images; evaluation time is kept out of the training clock. The last line, on rank 0, is the
result: `sync=esync target=0.80 reached=yes time=4.1s rounds=... steps=...`.

The data set is Debian's dataset-fashion-mnist (scripts/setup-data.sh installs it), found in
--data, $HETSYNC_DATA or /usr/share/datasets/fashion-mnist.
"""

import argparse
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import hetsync
from fashion_mnist import data_dir, idx


def load(d, split, limit=None):
    x = idx(os.path.join(d, "%s-images-idx3-ubyte.gz" % split))[:limit]
    y = idx(os.path.join(d, "%s-labels-idx1-ubyte.gz" % split))[:limit]
    x = torch.from_numpy(x.reshape(len(x), -1).astype(np.float32) / 255.0)
    return (x - 0.2860) / 0.3530, torch.from_numpy(y.astype(np.int64))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sync", default="esync", help="ssgd, esync or wbsp")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--slowdown", default="1,1,2,4", help="per-rank slowdown factors")
    ap.add_argument("--slowdown-base", default="8ms", help="the step time of a factor-1 device")
    ap.add_argument("--target", type=float, default=0.80)
    ap.add_argument("--max-time", type=float, default=60, help="seconds of training at most")
    ap.add_argument("--eval-every", type=float, default=0.2, help="seconds of training between evaluations")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default="")
    ap.add_argument("--outer", default="none", help="outer optimizer of esync's and wbsp's rounds: none or nesterov (DiLoCo's)")
    a = ap.parse_args()

    torch.set_num_threads(1)
    hetsync.init()
    rank, size = hetsync.rank(), hetsync.size()
    d = data_dir(a.data)
    x, y = load(d, "train")
    shard = torch.arange(rank, len(x), size)  # an iid shard per rank
    x, y = x[shard], y[shard]
    tx, ty = load(d, "t10k", 2000)

    torch.manual_seed(a.seed)
    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    sess = hetsync.Session(model.parameters(), sync=a.sync, lr=a.lr, batch=a.batch, seed=a.seed,
                           slowdown=a.slowdown, slowdown_base=a.slowdown_base, max_time="%gs" % (2 * a.max_time),
                           **({"outer": a.outer} if a.outer != "none" else {}))
    g = torch.Generator().manual_seed(a.seed * 1000 + rank)
    order, at = torch.randperm(len(x), generator=g), 0
    start, evals, next_eval = time.perf_counter(), 0.0, a.eval_every
    steps = rounds = 0
    reached, acc = None, 0.0
    while True:
        if at + a.batch > len(order):
            order, at = torch.randperm(len(x), generator=g), 0
        i = order[at:at + a.batch]
        at += a.batch
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x[i]), y[i])
        opt.zero_grad()
        loss.backward()
        if sess.exchanges_params:
            opt.step()
        steps += 1
        if not sess.step(loss.item(), a.batch, seconds=time.perf_counter() - t0):
            continue
        r = sess.sync()
        rounds += 1
        if not sess.exchanges_params:
            opt.step()
        if rank == 0:
            trained = time.perf_counter() - start - evals
            if trained >= next_eval:
                e0 = time.perf_counter()
                with torch.no_grad():
                    acc = (model(tx).argmax(1) == ty).float().mean().item()
                evals += time.perf_counter() - e0
                sess.record_eval(acc)  # into the run directory under `hetsync launch --out`
                next_eval = trained + a.eval_every
                if acc >= a.target and reached is None:
                    reached = trained
                    sess.stop()
                elif trained >= a.max_time:
                    sess.stop()
        if r.stop:
            break
    sess.close()
    print("rank %d: %d rounds, %d local steps" % (rank, rounds, steps), flush=True)
    if rank == 0:
        t = reached if reached is not None else time.perf_counter() - start - evals
        print("sync=%s outer=%s target=%.2f reached=%s time=%.2fs accuracy=%.4f rounds=%d steps=%d" % (
            a.sync, a.outer, a.target, "yes" if reached is not None else "no", t, acc, rounds, steps), flush=True)
    hetsync.finalize()


if __name__ == "__main__":
    main()
