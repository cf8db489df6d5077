"""A process that no launcher started: a job of one rank. It also checks that loading the
library leaves the program's signal handlers alone."""

import signal

import numpy  # noqa: F401 (loaded before the baseline: their libraries are not hetsync's)
import torch  # noqa: F401


def caught():
    # The signals a program may use (the C library reserves those between 32 and SIGRTMIN)
    # that have a handler installed (SigCgt of /proc/self/status: bit n-1 is signal n).
    with open("/proc/self/status") as f:
        mask = int([line.split()[1] for line in f if line.startswith("SigCgt:")][0], 16)
    usable = [n for n in range(1, 65) if n < 32 or signal.SIGRTMIN <= n <= signal.SIGRTMAX]
    return {n for n in usable if mask >> (n - 1) & 1}


before = caught()
import check  # noqa: E402 (imports hetsync and loads the library)
import hetsync  # noqa: E402

# The Go runtime of a c-shared library handles only the signals its code may cause (and
# forwards the rest): Python's own handlers stay as the program set them.
go_runtime = {signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGPIPE, signal.SIGURG}
added = caught() - before
assert added <= go_runtime, "loading hetsync installed handlers for %s" % sorted(added - go_runtime)
assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL

comm = hetsync.init()
assert (comm.rank(), comm.size(), comm.local_rank()) == (0, 1, 0)
check.check_errors(comm)
check.check_comm(comm, "alone")
print("alone ok")
