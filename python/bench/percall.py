"""The package's own cost per call, in one process that no launcher started (a job of one
rank: Go has nothing to exchange). A benchmark, not a test:

    PYTHONPATH=python OMP_NUM_THREADS=1 /usr/bin/python3 python/bench/percall.py

It prints the median, over 5 rounds of 4,000 calls, of one allreduce of 4 bytes through each
path: a blocking call on the main thread (which waits in slices so that signals are handled),
async_op=True and wait(), the C ABI alone on the calling thread, and a blocking call on another
thread (which runs the call on that thread).
"""

import statistics
import threading
import time

import torch

import hetsync


def timed(fn, rounds=5, calls=4000):
    for _ in range(200):
        fn()
    per = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per.append((time.perf_counter() - t0) / calls)
    return statistics.median(per) * 1e6


def main():
    comm = hetsync.init()
    x = torch.ones(1)
    lib, ptr = hetsync._abi.lib, x.data_ptr()
    rows = [("hetsync.allreduce, main thread", timed(lambda: comm.allreduce(x))),
            ("allreduce(async_op=True) + wait()", timed(lambda: comm.allreduce(x, async_op=True).wait())),
            ("C ABI, hs_allreduce(wait_ms=-1)",
             timed(lambda: lib.hs_allreduce(comm._id, ptr, 1, hetsync._abi.FLOAT32, hetsync._abi.SUM, -1, None)))]
    got = []
    th = threading.Thread(target=lambda: got.append(timed(lambda: comm.allreduce(x))))
    th.start()
    th.join()
    rows.append(("hetsync.allreduce, another thread", got[0]))
    for name, us in rows:
        print("%-36s %7.1f us" % (name, us))


if __name__ == "__main__":
    main()
