"""The C ABI of libhetsync.so (capi/hetsync.h), loaded with ctypes.

ctypes.CDLL releases the GIL for the whole of every foreign call, so Python threads run while
Go waits. Every call that can fail returns a C string that this module turns into a
HetsyncError carrying hetsync's own message, and frees.
"""

import ctypes
import os

_LIB_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib", "libhetsync.so")

# Element types and reductions, as capi/hetsync.h numbers them.
FLOAT32, FLOAT64, INT32, INT64 = 1, 2, 3, 4
SUM, AVG, MIN, MAX, PROD = 1, 2, 3, 4, 5


class HetsyncError(RuntimeError):
    """A failure that hetsync reported: the message names the rank, the peer and the call."""


def _load():
    if not os.path.exists(_LIB_PATH):
        raise ImportError(
            "hetsync: %s is missing: build it with `make python` in the repository root" % _LIB_PATH)
    lib = ctypes.CDLL(_LIB_PATH)
    i64, i64p, intc, intp, vp = (ctypes.c_int64, ctypes.POINTER(ctypes.c_int64), ctypes.c_int,
                                 ctypes.POINTER(ctypes.c_int), ctypes.c_void_p)
    # Results are c_void_p, not c_char_p, so that the pointer survives to be freed.
    sigs = {
        "hs_init": [i64p],
        "hs_info": [i64, intp, intp, intp, intp],
        "hs_settings": [i64],
        "hs_split": [i64, intc, intc, i64p],
        "hs_close": [i64],
        "hs_wait": [i64, i64, intp],
        "hs_allreduce": [i64, vp, i64, intc, intc, i64, i64p],
        "hs_reduce_scatter": [i64, vp, i64, intc, intc, i64, i64p],
        "hs_reduce": [i64, vp, i64, intc, intc, intc, i64, i64p],
        "hs_allgather": [i64, vp, i64, intc, i64, i64p],
        "hs_broadcast": [i64, vp, i64, intc, intc, i64, i64p],
        "hs_alltoall": [i64, vp, vp, i64, intc, i64, i64p],
        "hs_barrier": [i64, i64, i64p],
        "hs_send": [i64, vp, i64, intc, intc, i64, i64p],
        "hs_recv": [i64, vp, i64, intc, intc, i64, i64p],
        "hs_session_new": [i64, ctypes.c_char_p, vp, vp, i64, i64p],
        "hs_session_exchange": [i64, intp, intp],
        "hs_session_step": [i64, ctypes.c_double, i64, i64, ctypes.c_double, i64, i64p],
        "hs_session_should_sync": [i64, i64, i64p],
        "hs_session_step_sync": [i64, ctypes.c_double, i64, i64, ctypes.c_double, i64, i64p],
        "hs_session_sync": [i64, i64, i64p],
        "hs_session_state": [i64, intp, intp, i64p, ctypes.POINTER(ctypes.c_double)],
        "hs_session_stop": [i64],
        "hs_session_close": [i64, i64, i64p],
        "hs_session_eval": [i64, ctypes.c_double, ctypes.c_double],
    }
    for name, args in sigs.items():
        f = getattr(lib, name)
        f.argtypes = args
        f.restype = vp
    lib.hs_free.argtypes = [vp]
    lib.hs_free.restype = None
    return lib


lib = _load()


def text(p):
    """The C string p as str, freed."""
    if not p:
        return None
    try:
        return ctypes.string_at(p).decode("utf-8", "replace")
    finally:
        lib.hs_free(p)


def check(p):
    """Raises the error the C call returned, if any."""
    if p:
        raise HetsyncError(text(p))
