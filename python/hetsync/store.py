"""The job's key-value store for torch.distributed: a torch Store held by rank 0 and reached
over the job's own connections, which only the job's ranks can open (torch's TCPStore, which
env:// makes, admits anyone who reaches its port).

    import hetsync, torch.distributed as dist
    dist.init_process_group("hetsync")                          # env://: this store, no TCPStore
    dist.init_process_group("gloo", init_method="hetsync://")  # any backend over this store

Importing hetsync registers the rendezvous scheme "hetsync://" and makes the "hetsync"
backend's env:// (init_process_group's default) rendezvous through it: under `hetsync launch`
no port is opened for torch, and MASTER_ADDR and MASTER_PORT are not read. Other backends keep
torch's env:// and its TCPStore unless given init_method="hetsync://".

The store is the Go service/store over the C ABI (hs_store_*): one per process, on the job's
Comm, created at the first rendezvous on every rank and closed by hetsync.finalize() (at exit)
before the rank leaves the job; rank 0's close waits until every rank has closed its own, for
CLOSE_WAIT at most. Each
rendezvous gets a Store of its own key prefix, so that a process group made again after
destroy_process_group starts from no keys, as with a new TCPStore.
"""

import ctypes
import datetime
import functools
import inspect
import os
import sys
import threading
import urllib.parse

import torch.distributed as dist
from torch._C._distributed_c10d import Store as _C10dStore

import hetsync
from . import _abi
from ._abi import HetsyncError
from ._comm import _run

SCHEME = "hetsync"
NAME = "hetsync"
# torch's default store timeout (default_pg_timeout).
DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)
# How long rank 0's close waits for the other ranks to close their stores. Ranks that end
# together (a DDP job) close within it; a rank still working after it finds the store gone, as
# torch's TCPStore is gone once rank 0 exits; and a rank 0 that ends early (on an error, while
# the others wait for it in a collective) leaves the job after it, which fails their wait.
CLOSE_WAIT = datetime.timedelta(seconds=30)

_i64, _i64p, _intp, _vp = ctypes.c_int64, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int), ctypes.c_void_p
_vpp = ctypes.POINTER(ctypes.c_void_p)
_SIGS = {
    "hs_store_new": [_i64, _i64p],
    "hs_store_set": [_i64, _vp, _i64, _vp, _i64, _i64, _i64, _i64p],
    "hs_store_get": [_i64, _vp, _i64, _i64, _vpp, _i64p, _i64, _i64p],
    "hs_store_add": [_i64, _vp, _i64, _i64, _i64p, _i64, _i64, _i64p],
    "hs_store_compare_set": [_i64, _vp, _i64, _vp, _i64, _vp, _i64, _vpp, _i64p, _i64, _i64, _i64p],
    "hs_store_wait": [_i64, _vpp, _i64p, _i64, _i64, _i64, _i64p],
    "hs_store_check": [_i64, _vpp, _i64p, _i64, _intp, _i64, _i64, _i64p],
    "hs_store_delete_key": [_i64, _vp, _i64, _intp, _i64, _i64, _i64p],
    "hs_store_num_keys": [_i64, _i64p, _i64, _i64, _i64p],
    "hs_store_close": [_i64, _i64, _i64, _i64p],
}
for _name, _args in _SIGS.items():
    _f = getattr(_abi.lib, _name)
    _f.argtypes, _f.restype = _args, _vp


def _bytes(v, what):
    """v as bytes: torch's C++ passes bytes (and lists of ints to compare_set), Python callers
    str or bytes."""
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, (bytes, bytearray, memoryview, list, tuple)):
        return bytes(v)
    raise TypeError("hetsync store: %s must be str or bytes, got %s" % (what, type(v).__name__))


def _millis(timeout):
    """A timeout (timedelta or seconds) in milliseconds; 0, torch's "no timeout", waits forever."""
    if timeout is None:
        return 0
    s = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)
    return max(int(s * 1000), 1) if s > 0 else 0


class _Kept:
    """What Go writes into when a call completes: kept alive, as a call's views are, until it
    has (an interrupted wait leaves the call running)."""

    __slots__ = ("objs",)
    finish = None

    def __init__(self, *objs):
        self.objs = objs


class _Handle:
    """The process's Go store as _comm._run takes a communicator: its id, the process that made
    it (a forked child may not call it) and the job's rank and polling choice."""

    def __init__(self, sid, comm):
        self._id, self._pid, self._rank, self._polls = sid, comm._pid, comm.rank(), comm._polls

    def call(self, fn, *args, keep=()):
        if not self._id:
            raise HetsyncError("hetsync store: rank %d: the store is closed (hetsync.finalize closed it)" % self._rank)
        _run(self, fn, args, (_Kept(*keep),) if keep else (), False)


_handle = None
_handle_lock = threading.Lock()
# The rendezvous' Stores, kept alive: torch holds them from C++ only, and a Python subclass's
# object must outlive its uses there.
_stores = []


def _job_handle():
    """The process's Go store, created on the job's Comm the first time (on every rank: the
    first rendezvous)."""
    global _handle
    with _handle_lock:
        comm = hetsync.init()
        if _handle is None or _handle._pid != os.getpid():
            out = ctypes.c_int64(0)
            _abi.check(_abi.lib.hs_store_new(comm._id, ctypes.byref(out)))
            _handle = _Handle(out.value, comm)
        return _handle


def close(timeout=CLOSE_WAIT):
    """Closes this process's store; hetsync.finalize() calls it before leaving the job. On rank
    0 it returns once every other rank has closed its store, or timeout has passed (then the
    ranks still open find the store gone)."""
    global _handle
    with _handle_lock:
        h = _handle
        if h is None or not h._id or h._pid != os.getpid():
            return
        _handle = None
        try:
            h.call(_abi.lib.hs_store_close, _millis(timeout))
        finally:
            h._id = 0  # the library released the id at once, whatever the close's outcome


class Store(_C10dStore):
    """A torch.distributed Store over the job's store, its keys under prefix. Made by the
    "hetsync://" rendezvous; job_store() makes one for a program's own use."""

    def __init__(self, prefix="", timeout=DEFAULT_TIMEOUT):
        super().__init__()
        self._h = _job_handle()
        self._prefix = _bytes(prefix, "prefix")
        self.set_timeout(timeout)

    def _key(self, key):
        return self._prefix + _bytes(key, "key")

    def _keys(self, keys):
        ks = [self._key(k) for k in keys]
        arr = (ctypes.c_void_p * max(len(ks), 1))(*[ctypes.cast(ctypes.c_char_p(k), ctypes.c_void_p) for k in ks])
        lens = (ctypes.c_int64 * max(len(ks), 1))(*[len(k) for k in ks])
        return ks, arr, lens

    def _ms(self):
        return _millis(self.timeout)

    def _value(self, fn, *args, timeout=()):
        """Runs fn(*args, &val, &len, *timeout) and returns the value it wrote."""
        val, n = ctypes.c_void_p(), ctypes.c_int64(0)
        self._h.call(fn, *args, ctypes.byref(val), ctypes.byref(n), *timeout, keep=(val, n))
        if not val.value:
            return b""
        try:
            return ctypes.string_at(val.value, n.value)
        finally:
            _abi.lib.hs_free(val.value)

    def set(self, key, value):
        k, v = self._key(key), _bytes(value, "value")
        self._h.call(_abi.lib.hs_store_set, k, len(k), v, len(v), self._ms())

    def get(self, key):
        k = self._key(key)
        return self._value(_abi.lib.hs_store_get, k, len(k), self._ms())

    def add(self, key, amount):
        k, out = self._key(key), ctypes.c_int64(0)
        self._h.call(_abi.lib.hs_store_add, k, len(k), int(amount), ctypes.byref(out), self._ms(), keep=(out,))
        return out.value

    def compare_set(self, key, expected_value, desired_value):
        k, e, d = self._key(key), _bytes(expected_value, "expected value"), _bytes(desired_value, "desired value")
        return self._value(_abi.lib.hs_store_compare_set, k, len(k), e, len(e), d, len(d), timeout=(self._ms(),))

    def wait(self, keys, timeout=None):
        ks, arr, lens = self._keys(keys)
        self._h.call(_abi.lib.hs_store_wait, arr, lens, len(ks), self._ms() if timeout is None else _millis(timeout))

    def check(self, keys):
        ks, arr, lens = self._keys(keys)
        ok = ctypes.c_int(0)
        self._h.call(_abi.lib.hs_store_check, arr, lens, len(ks), ctypes.byref(ok), self._ms(), keep=(ok,))
        return bool(ok.value)

    def delete_key(self, key):
        k, out = self._key(key), ctypes.c_int(0)
        self._h.call(_abi.lib.hs_store_delete_key, k, len(k), ctypes.byref(out), self._ms(), keep=(out,))
        return bool(out.value)

    def num_keys(self):
        """The number of keys of the whole job's store, every prefix's (as torch's PrefixStore
        counts)."""
        out = ctypes.c_int64(0)
        self._h.call(_abi.lib.hs_store_num_keys, ctypes.byref(out), self._ms(), keep=(out,))
        return out.value


def job_store(prefix="", timeout=DEFAULT_TIMEOUT):
    """A Store over the job's store with its keys under prefix. Every rank must have made one
    (or rendezvoused through "hetsync://") before any rank's call completes."""
    return Store(prefix, timeout)


_rendezvous_count = 0


def _rendezvous(url, timeout=DEFAULT_TIMEOUT, **kwargs):
    """torch's rendezvous handler of "hetsync://": the job's rank and size (a rank or
    world_size in the URL must be hetsync's) and a Store of this rendezvous's own prefix."""
    global _rendezvous_count
    world = hetsync.init()
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(url).query))
    for name, have in (("rank", world.rank()), ("world_size", world.size())):
        if name in query and int(query[name]) != have:
            raise HetsyncError("hetsync:// rendezvous: rank %d: torch asks for %s %s, but hetsync formed rank %d of %d: "
                               "RANK and WORLD_SIZE must be the ones the launcher gave"
                               % (world.rank(), name, query[name], world.rank(), world.size()))
    # Every rank counts its rendezvous alike (init_process_group is collective), so the
    # prefixes agree.
    _rendezvous_count += 1
    store = Store("rendezvous%d/" % _rendezvous_count, timeout)
    _stores.append(store)
    yield store, world.rank(), world.size()
    raise RuntimeError("hetsync:// rendezvous: the job's ranks are fixed; it cannot rendezvous again")


def _ours(backend):
    """Whether backend names hetsync alone: "hetsync", or torch 2's "cpu:hetsync,cuda:hetsync"."""
    if backend is None:
        return False
    parts = [p.split(":")[-1].strip().lower() for p in str(backend).split(",")]
    return all(p == NAME for p in parts)


def _wrap_init(init):
    sig = inspect.signature(init)

    @functools.wraps(init)
    def wrapped(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        a = bound.arguments
        method = a.get("init_method")
        if _ours(a.get("backend")) and a.get("store") is None and (method is None or method.startswith("env://")):
            # env:// would make a TCPStore listening on MASTER_PORT: the "hetsync" backend
            # rendezvouses over the job's own store instead (keeping env://'s query).
            a["init_method"] = SCHEME + "://" + (method[len("env://"):] if method else "")
        return init(*bound.args, **bound.kwargs)
    wrapped._hetsync_wrapped = True
    return wrapped


def register():
    """Registers "hetsync://" with torch's rendezvous and makes the "hetsync" backend's env://
    use it; importing hetsync calls it once."""
    # The module, not torch.distributed.rendezvous, the function that the package exports
    # under the module's name.
    rdv = sys.modules["torch.distributed.rendezvous"]
    if SCHEME not in rdv._rendezvous_handlers:
        rdv.register_rendezvous_handler(SCHEME, _rendezvous)
    c10d = dist.distributed_c10d
    if not getattr(c10d.init_process_group, "_hetsync_wrapped", False):
        c10d.init_process_group = _wrap_init(c10d.init_process_group)
        dist.init_process_group = c10d.init_process_group
