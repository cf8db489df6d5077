"""Every synchronization strategy (ESync, WBSP and WBSP-optimized, SSGD, ASGD and DC-ASGD, SSP,
Sync-Switch, local SGD, local training) for any torch model, driven by the program's own
training loop: hetsync decides, after each local step, whether this rank synchronizes now
(ESync's state service, WBSP's trigger, the parameter server), and runs the round.

    sess = hetsync.Session(model.parameters(), sync="esync", lr=0.05, batch=64)
    for x, y in loader:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward()
        if sess.exchange == "parameters":  # esync, wbsp, wbsp-opt, local SGD: every local step
            opt.step()
        if sess.step(loss.item(), len(x)):
            r = sess.sync()                 # "parameters": the model is now the global one
            if r.exchange == "gradients":   # ssgd: on the ranks' average gradient
                opt.step()
            if r.stop:                      # "server" (asgd, dcasgd, ssp, sync-switch): the
                break                       # model is the strategy's update; no opt.step()
    sess.close()

`exchange` is asked before each step (a strategy may change it between rounds); the Round that
sync() returns names the exchange it ran. Settings are `hetsync train`'s flags with '_' for '-'
(lr, batch, slowdown=[1, 1, 2, 4], slowdown_base="8ms", max_time="30s", a strategy's options
such as local_lr or wbsp_period; train_size, the samples of all ranks' training data, for
epochs), the same on every rank; the session checks that they agree and starts every rank from
rank 0's parameters. Under "server" the update is the strategy's, with the job's settings
(lr; momentum and weight_decay for sync-switch), not the program's optimizer. The strategy's decisions stay in Go; Python moves the parameters
(or gradients) into one flat vector at each round and back.
"""

import collections
import ctypes
import os
import threading
import time

from . import _abi
from ._abi import HetsyncError
from ._comm import Work, _MAIN_THREAD

Round = collections.namedtuple("Round", "stop round global_loss exchange")

# trainer.Exchange's values, as hs_session_exchange reports them.
_EXCHANGES = {1: "gradients", 2: "parameters", 3: "server"}


def _blocking(fn, *args):
    """Runs a session call to completion; on the main thread in slices, so that signals are
    handled while it waits (as for the collectives)."""
    req = ctypes.c_int64(0)
    main = threading.get_ident() == _MAIN_THREAD
    _abi.check(fn(*args, 0 if main else -1, ctypes.byref(req)))
    if req.value:
        Work(req.value, (), os.getpid())._wait(None, False)


def _flag(name, value):
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    elif isinstance(value, bool):
        value = "true" if value else "false"
    return "%s=%s" % (name.replace("_", "-"), value)


class Session:
    """This rank's part of a job whose training loop the program owns (see the module's doc)."""

    def __init__(self, params, comm=None, **settings):
        import torch

        from . import world
        comm = comm or world()
        self._pid = os.getpid()
        self._params = [p for p in params if p.requires_grad]
        if not self._params:
            raise HetsyncError("hetsync.Session: no parameters that require a gradient")
        for p in self._params:
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise HetsyncError("hetsync.Session: parameters must be float32 CPU tensors; got %s on %s"
                                   % (p.dtype, p.device))
        n = sum(p.numel() for p in self._params)
        self._flat = torch.zeros(n, dtype=torch.float32)
        self._grad = torch.zeros(n, dtype=torch.float32)
        self._to_flat(False)
        flags = "\n".join(_flag(k, v) for k, v in settings.items()).encode()
        out = ctypes.c_int64(0)
        _abi.check(_abi.lib.hs_session_new(comm._id, flags, self._flat.data_ptr(), self._grad.data_ptr(),
                                           n, ctypes.byref(out)))
        self._id = out.value
        self._from_flat(False)  # rank 0's parameters, on every rank
        self._last = time.perf_counter()

    def _views(self, grads):
        import torch
        off = 0
        for p in self._params:
            k = p.numel()
            if grads:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                yield p.grad, self._grad[off:off + k]
            else:
                yield p.data, self._flat[off:off + k]
            off += k

    def _to_flat(self, grads):
        for t, flat in self._views(grads):
            flat.copy_(t.reshape(-1))

    def _from_flat(self, grads):
        for t, flat in self._views(grads):
            t.copy_(flat.view_as(t))

    def _exchange(self):
        kind, at_steps = ctypes.c_int(0), ctypes.c_int(0)
        _abi.check(_abi.lib.hs_session_exchange(self._id, ctypes.byref(kind), ctypes.byref(at_steps)))
        return _EXCHANGES[kind.value], bool(at_steps.value)

    @property
    def exchange(self):
        """What the coming round exchanges, and so where the program's optimizer steps:
        "gradients" (after sync(), on the ranks' average), "parameters" (after every backward,
        before step(); sync() may replace the parameters) or "server" (never: sync() leaves
        the strategy's update of the gradient in the parameters)."""
        self._check()
        return self._exchange()[0]

    @property
    def exchanges_params(self):
        """Whether the coming round exchanges the parameters (exchange == "parameters")."""
        return self.exchange == "parameters"

    def _check(self):
        if os.getpid() != self._pid:
            raise HetsyncError("hetsync.Session: used in process %d, a child forked from %d" % (os.getpid(), self._pid))
        if not self._id:
            raise HetsyncError("hetsync.Session: the session is closed")

    def step(self, loss, samples, correct=0, seconds=None):
        """Reports a local step (its mean loss, batch size, correct predictions and duration:
        by default the time since the previous step or round ended) and returns whether this
        rank synchronizes now. A rank given a slowdown sleeps here."""
        self._check()
        now = time.perf_counter()
        if seconds is None:
            seconds = now - self._last
        # wbsp-opt over an allreduce re-bases the steps not yet sent between rounds.
        at_steps = self._exchange()[1]
        if at_steps:
            self._to_flat(False)
        _blocking(_abi.lib.hs_session_step_sync, self._id, float(loss), int(samples), int(correct), float(seconds))
        if at_steps:
            self._from_flat(False)
        self._last = time.perf_counter()
        sync = ctypes.c_int(0)
        _abi.check(_abi.lib.hs_session_state(self._id, ctypes.byref(sync), None, None, None))
        return bool(sync.value)

    def sync(self):
        """Runs the round: afterwards the parameters are the global model ("parameters"), each
        parameter's .grad the ranks' average gradient ("gradients"), or the parameters the
        strategy's update of this step's gradient ("server"). Returns Round(stop, round,
        global_loss, exchange): stop is the job's agreed stop (after the same round on every
        rank, except under the parameter server's asynchronous strategies, where each rank
        learns it from the server's reply to its next push); exchange is the round's."""
        self._check()
        ex = self._exchange()[0]
        if ex != "gradients":
            self._to_flat(False)
        if ex != "parameters":
            self._to_flat(True)
        _blocking(_abi.lib.hs_session_sync, self._id)
        self._from_flat(ex == "gradients")
        stop, rnd, loss = ctypes.c_int(0), ctypes.c_int64(0), ctypes.c_double(0)
        _abi.check(_abi.lib.hs_session_state(self._id, None, ctypes.byref(stop), ctypes.byref(rnd), ctypes.byref(loss)))
        self._last = time.perf_counter()
        return Round(bool(stop.value), rnd.value, loss.value, ex)

    def stop(self):
        """Rank 0's vote to stop after the next round (other ranks' votes are ignored)."""
        self._check()
        _abi.check(_abi.lib.hs_session_stop(self._id))

    def close(self):
        """Ends the session; it returns when no other rank still needs this one."""
        if self._id and os.getpid() == self._pid:
            sid, self._id = self._id, 0
            _blocking(_abi.lib.hs_session_close, sid)

    def record_eval(self, accuracy, loss=float("nan")):
        """Rank 0: records its test accuracy (and loss) of the model after the latest round in the
        run directory (out=), for `hetsync report`'s time to accuracy (docs/python.md)."""
        self._check()
        _abi.check(_abi.lib.hs_session_eval(self._id, float(accuracy), float(loss)))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
