"""DDP training of torchvision's ResNet-18, adapted to 28x28 grey images, on Fashion-MNIST over
torch.distributed's hetsync backend (or Gloo, to compare: --backend gloo).

    make build python
    PYTHONPATH=python bin/hetsync launch -np 4 -- /usr/bin/python3 examples/torch/ddp_resnet.py

The data set is Debian's dataset-fashion-mnist (scripts/setup-data.sh installs it), found in
--data, $HETSYNC_DATA or /usr/share/datasets/fashion-mnist. Each rank prints nothing but rank 0,
which prints the loss as it trains, the mean step time and the test accuracy.

--device cuda trains on the GPU (rank i on GPU i modulo the GPUs this host has; the default
when torch sees one): the backend stages each gradient bucket through host memory.
"""

import argparse
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import hetsync  # noqa: F401 (registers the "hetsync" backend)
from fashion_mnist import data_dir, idx


def dataset(d, split, limit):
    images = idx(os.path.join(d, "%s-images-idx3-ubyte.gz" % split))[:limit]
    labels = idx(os.path.join(d, "%s-labels-idx1-ubyte.gz" % split))[:limit]
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    x = (x - 0.2860) / 0.3530  # Fashion-MNIST's mean and standard deviation
    return TensorDataset(x, torch.from_numpy(labels.astype(np.int64)))


def resnet18_28x28():
    """ResNet-18 for 28x28 grey images: one input channel, a 3x3 stride-1 stem and no max
    pooling, so the four stages see 28, 14, 7 and 4 pixels."""
    m = torchvision.models.resnet18(num_classes=10)
    m.conv1 = nn.Conv2d(1, 64, kernel_size=3, stride=1, padding=1, bias=False)
    m.maxpool = nn.Identity()
    return m


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="hetsync", choices=["hetsync", "gloo"])
    ap.add_argument("--data", help="directory of the Fashion-MNIST IDX files")
    ap.add_argument("--steps", type=int, default=100, help="training steps (each rank: one batch a step)")
    ap.add_argument("--batch", type=int, default=32, help="batch size per rank")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--train-samples", type=int, default=60000)
    ap.add_argument("--test-samples", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=1, help="DataLoader worker processes per rank")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()

    dist.init_process_group(args.backend)
    rank, size = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cpu")
    if args.device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", rank))
        dev = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    torch.manual_seed(0)
    d = data_dir(args.data)
    train = dataset(d, "train", args.train_samples)
    sampler = DistributedSampler(train, num_replicas=size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=args.batch, sampler=sampler, num_workers=args.workers, drop_last=True)

    model = DDP(resnet18_28x28().to(dev), device_ids=[dev] if dev.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    step, epoch, times = 0, 0, []
    model.train()
    while step < args.steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            t0 = time.perf_counter()
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)  # the step's time includes its kernels
            times.append(time.perf_counter() - t0)
            step += 1
            if rank == 0 and (step % 10 == 0 or step == 1):
                print("step %d loss %.4f step time %.3f s" % (step, loss.item(), times[-1]), flush=True)
            if step == args.steps:
                break
        epoch += 1

    # Test accuracy: each rank evaluates its share, summed over the ranks.
    test = dataset(d, "t10k", args.test_samples)
    model.eval()
    right = torch.zeros(2, dtype=torch.int64)
    with torch.no_grad():
        for x, y in DataLoader(test, batch_size=256, sampler=DistributedSampler(test, size, rank, shuffle=False)):
            right += torch.tensor([(model(x.to(dev)).argmax(1).cpu() == y).sum().item(), len(y)])
    dist.all_reduce(right)
    if rank == 0:
        skip = min(5, len(times) - 1)  # the first steps warm up the allocator and the connections
        print("backend %s, %d ranks on %s: %d steps, mean step %.3f s, test accuracy %.4f (%d images)"
              % (args.backend, size, dev.type, step, sum(times[skip:]) / max(1, len(times) - skip),
                 right[0].item() / right[1].item(), right[1].item()))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
