"""Views of torch tensors and numpy arrays as (pointer, count, dtype code), without copies.

A tensor or array is passed to Go as its own memory: it must be contiguous (a strided view
would have Go write elements that are not the tensor's), and its dtype one that hetsync
reduces. The collectives that only move data (broadcast, allgather, alltoall, send, recv) take
any dtype, moved as 4- or 8-byte words. A CUDA tensor is staged through host memory: Go works
on a host copy, which is copied back once the call completes.
"""

from . import _abi

try:
    import numpy as _np
except ImportError:  # numpy is optional; torch tensors work without it.
    _np = None

try:
    import torch as _torch
except ImportError:
    _torch = None

_TORCH_CODES = {}
if _torch is not None:
    _TORCH_CODES = {_torch.float32: _abi.FLOAT32, _torch.float64: _abi.FLOAT64,
                    _torch.int32: _abi.INT32, _torch.int64: _abi.INT64}
_NUMPY_CODES = {}
if _np is not None:
    _NUMPY_CODES = {_np.dtype(_np.float32): _abi.FLOAT32, _np.dtype(_np.float64): _abi.FLOAT64,
                    _np.dtype(_np.int32): _abi.INT32, _np.dtype(_np.int64): _abi.INT64}

REDUCED_DTYPES = "float32, float64, int32, int64"


class View:
    """One buffer as Go sees it. keep holds what must stay alive while Go uses ptr; finish,
    when not None, runs once the call has completed (the copy back of a staged CUDA tensor)."""

    __slots__ = ("ptr", "count", "code", "keep", "finish", "nbytes")

    def __init__(self, ptr, count, code, keep, nbytes, finish=None):
        self.ptr, self.count, self.code, self.keep, self.nbytes, self.finish = ptr, count, code, keep, nbytes, finish


def view(obj, call, reducing, blocks=1):
    """obj as a View for call. reducing: the call combines values, so the dtype must be one
    hetsync reduces; otherwise any dtype is moved as words, and blocks (the number of equal
    blocks the call splits the buffer into) must split it at word boundaries."""
    if _torch is not None and isinstance(obj, _torch.Tensor):
        return _tensor_view(obj, call, reducing, blocks)
    if _np is not None and isinstance(obj, _np.ndarray):
        return _array_view(obj, call, reducing, blocks)
    raise TypeError("hetsync.%s: expected a torch.Tensor or a numpy.ndarray, got %s" % (call, type(obj).__name__))


def _tensor_view(t, call, reducing, blocks):
    if not t.is_contiguous():
        raise ValueError("hetsync.%s: the tensor (shape %s, strides %s) is not contiguous: pass "
                         "t.contiguous() and copy the result back" % (call, tuple(t.shape), t.stride()))
    if t.layout != _torch.strided:
        raise TypeError("hetsync.%s: %s tensors are not supported, only dense (strided) ones" % (call, t.layout))
    finish, host = None, t
    if t.device.type != "cpu":
        # Host staging: Go reads and writes host memory only.
        host = t.detach().to("cpu")

        def finish():
            t.copy_(host)
    nbytes = host.numel() * host.element_size()
    code = _TORCH_CODES.get(host.dtype)
    if code is not None:
        return View(host.data_ptr(), host.numel(), code, host, nbytes, finish)
    return _words(host.data_ptr(), nbytes, str(host.dtype), call, reducing, blocks, host, finish)


def _array_view(a, call, reducing, blocks):
    if not a.flags.c_contiguous:
        raise ValueError("hetsync.%s: the array (shape %s, strides %s) is not C-contiguous: pass "
                         "numpy.ascontiguousarray(a) and copy the result back" % (call, a.shape, a.strides))
    if not a.flags.writeable:
        raise ValueError("hetsync.%s: the array is read-only; collectives write their result in place" % call)
    code = _NUMPY_CODES.get(a.dtype)
    if code is not None:
        return View(a.ctypes.data, a.size, code, a, a.nbytes)
    return _words(a.ctypes.data, a.nbytes, str(a.dtype), call, reducing, blocks, a, None)


def _words(ptr, nbytes, dtype, call, reducing, blocks, keep, finish):
    if reducing:
        raise TypeError("hetsync.%s: dtype %s cannot be reduced: hetsync reduces %s" % (call, dtype, REDUCED_DTYPES))
    for size, code in ((8, _abi.INT64), (4, _abi.INT32)):
        if nbytes % (size * blocks) == 0:
            return View(ptr, nbytes // size, code, keep, nbytes, finish)
    raise TypeError("hetsync.%s: dtype %s: %d bytes in %d block(s) is not a whole number of 4-byte words per "
                    "block, which a non-reducing collective on a type hetsync does not reduce needs; "
                    "use one of %s or pad the buffer" % (call, dtype, nbytes, blocks, REDUCED_DTYPES))
