"""Ranks that end without calling finalize(): the others leave the job at exit, so rank 0,
still in it, sees them go and prints no peer failure. Rank 0 waits until the other ranks'
processes are gone, then stays a few heartbeats longer, the time in which a rank that had not
said goodbye is reported as one that exited while still in the job."""

import os
import time

import numpy as np

import hetsync

world = hetsync.init()
r = world.rank()
x = np.zeros(world.size(), dtype=np.int64)
x[r] = os.getpid()
world.allreduce(x)
if r == 0:
    for pid in x[1:]:
        while True:
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
    time.sleep(4)
print("left", r, flush=True)
