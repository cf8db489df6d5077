"""Signals reach a rank whose main thread waits in a collective: SIGINT raises
KeyboardInterrupt there, and the program's own SIGTERM handler runs, with its cleanup, when the
launcher stops the job."""

import os
import signal
import sys
import threading

import torch

import hetsync
from hetsync._comm import Work

# The program's choice, not the library's: SIGTERM (the launcher's stop) exits through Python.
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))


def when_waiting(then):
    """Runs then() on a thread once the main thread waits inside the library."""
    main = threading.main_thread().ident

    def watch():
        while True:
            f = sys._current_frames().get(main)
            if f is not None and f.f_code is Work._poll.__code__:
                break
            threading.Event().wait(0.001)
        then()
    threading.Thread(target=watch, daemon=True).start()


hetsync.init()
rank = hetsync.rank()
peer = 1 - rank
# Made once rank 0's wait was interrupted; only then does rank 1 enter the barrier.
interrupted = sys.argv[1]
if rank == 0:
    when_waiting(lambda: os.kill(os.getpid(), signal.SIGINT))
    try:
        hetsync.barrier()
        print("rank 0: barrier returned", flush=True)
    except KeyboardInterrupt:
        print("rank 0: KeyboardInterrupt during barrier", flush=True)
        open(interrupted, "w").close()
    # The interrupted barrier is still pending in Go and completes once rank 1 enters its own.
else:
    while not os.path.exists(interrupted):
        threading.Event().wait(0.01)
    hetsync.barrier()
hetsync.allreduce(torch.ones(1))

# The watcher thread prints while the main thread waits in Go: the call released the GIL (had
# it not, the print would never come and the test would time out).
when_waiting(lambda: print("rank %d: waiting" % rank, flush=True))
try:
    # Neither rank sends: the job waits until the launcher stops it.
    hetsync.recv(torch.zeros(4), peer)
finally:
    print("rank %d: cleanup" % rank, flush=True)
