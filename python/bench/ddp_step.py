"""DDP step time of the ResNet-18 example (examples/torch/ddp_resnet.py's model) on the hetsync
backend against Gloo in the same run: two replicas of the model, one wrapped by DDP on the
default (hetsync) group and one on a Gloo group, trained on the same random batches with their
steps interleaved, so that both see the same machine. A benchmark, not a test:

    PYTHONPATH=python OMP_NUM_THREADS=1 bin/hetsync launch -np 4 -- /usr/bin/python3 python/bench/ddp_step.py

Rank 0 prints the median step time of each backend (the warm-up steps not counted).
"""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import hetsync  # noqa: F401 (registers the "hetsync" backend)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "torch"))
from ddp_resnet import resnet18_28x28  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5, help="timed steps per backend")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps per backend first")
    ap.add_argument("--batch", type=int, default=16, help="images per rank and step")
    args = ap.parse_args()

    dist.init_process_group("hetsync")
    gloo = dist.new_group(backend="gloo")
    rank = dist.get_rank()
    nets = {}
    for name, group in (("hetsync", None), ("gloo", gloo)):
        torch.manual_seed(0)
        net = DDP(resnet18_28x28(), process_group=group)
        nets[name] = (net, torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9))
    g = torch.Generator().manual_seed(rank)
    times = {name: [] for name in nets}
    for step in range(args.warmup + args.steps):
        x = torch.randn(args.batch, 1, 28, 28, generator=g)
        y = torch.randint(0, 10, (args.batch,), generator=g)
        for name, (net, opt) in nets.items():
            t0 = time.perf_counter()
            opt.zero_grad()
            nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
            if step >= args.warmup:
                times[name].append(time.perf_counter() - t0)
    if rank == 0:
        h, gl = statistics.median(times["hetsync"]), statistics.median(times["gloo"])
        print("DDP ResNet-18, %d ranks, batch %d, median of %d steps: hetsync %.3f s, gloo %.3f s, gloo/hetsync %.2f"
              % (dist.get_world_size(), args.batch, args.steps, h, gl, gl / h), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
