package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/hetsync/hetsync"
	"github.com/hetsync/hetsync/collective"
)

func main() {}

// handles maps the ids the caller holds to communicators and requests: C memory may not keep
// Go pointers, so the caller gets numbers. Id 0 is never used, so that it can mean "none".
type handles[T any] struct {
	mu   sync.Mutex
	next int64
	m    map[int64]T
}

func (h *handles[T]) put(v T) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[int64]T)
	}
	h.next++
	h.m[h.next] = v
	return h.next
}

func (h *handles[T]) get(id int64) (T, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[id]
	return v, ok
}

func (h *handles[T]) drop(id int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, id)
}

var (
	comms    handles[*hetsync.Comm]
	requests handles[pending]
)

// cerr is err for the caller: NULL on success, else a C string (hs_free releases it).
func cerr(err error) *C.char {
	if err == nil {
		return nil
	}
	return C.CString(err.Error())
}

func comm(id C.int64_t, call string) (*hetsync.Comm, error) {
	c, ok := comms.get(int64(id))
	if !ok {
		return nil, fmt.Errorf("hetsync %s: communicator %d is not open (closed, or never returned by hs_init or hs_split)", call, int64(id))
	}
	return c, nil
}

// buffer views count elements of dtype at p as a Buffer, without a copy. The memory is the
// caller's (C memory), so the Go collectives may hold it until the call completes.
func buffer(p unsafe.Pointer, count C.int64_t, dtype C.int, call string) (collective.Buffer, error) {
	dt := collective.DType(dtype)
	if dt.Size() == 0 || int(dtype) != int(dt) {
		return collective.Buffer{}, fmt.Errorf("hetsync %s: dtype code %d is not one of HS_FLOAT32 (1), HS_FLOAT64 (2), HS_INT32 (3), HS_INT64 (4)", call, int(dtype))
	}
	if count < 0 {
		return collective.Buffer{}, fmt.Errorf("hetsync %s: negative element count %d", call, int64(count))
	}
	if count == 0 {
		return collective.Buffer{DType: dt, Bytes: []byte{}}, nil
	}
	if p == nil {
		return collective.Buffer{}, fmt.Errorf("hetsync %s: NULL buffer for %d elements", call, int64(count))
	}
	return collective.Buffer{DType: dt, Bytes: unsafe.Slice((*byte)(p), int(count)*dt.Size())}, nil
}

func reduceOp(op C.int, call string) (collective.ReduceOp, error) {
	o := collective.ReduceOp(op)
	if o < collective.Sum || o > collective.Prod || int(op) != int(o) {
		return 0, fmt.Errorf("hetsync %s: reduction code %d is not one of HS_SUM (1), HS_AVG (2), HS_MIN (3), HS_MAX (4), HS_PROD (5)", call, int(op))
	}
	return o, nil
}

// ctx is a fresh context for one call, never cancelled: the communicator's timeout
// (HETSYNC_TIMEOUT and its options) bounds every call, and the caller interrupts a wait by
// waiting in slices (hs_wait), not by cancelling.
func ctx() context.Context { return context.Background() }

// issue starts a call and waits for it up to waitMS milliseconds (forever when negative). When
// it completes in that time *req is 0 and its error is the result; otherwise *req is a request
// for hs_wait. A negative waitMS runs the call on the caller's thread, with no goroutine.
func issue(waitMS C.int64_t, req *C.int64_t, blocking func() error, start func() pending) *C.char {
	if req == nil || waitMS < 0 {
		if req != nil {
			*req = 0
		}
		return cerr(blocking())
	}
	r := start()
	done, err := await(r, int64(waitMS))
	if done {
		*req = 0
		return cerr(err)
	}
	*req = C.int64_t(requests.put(r))
	return nil
}

// await waits up to ms milliseconds (forever when negative) for r.
func await(r pending, ms int64) (bool, error) {
	if done, err := r.Test(); done || ms == 0 {
		return done, err
	}
	if ms < 0 {
		return true, r.Wait(ctx())
	}
	t := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer t.Stop()
	select {
	case <-r.Done():
		return r.Test()
	case <-t.C:
		return false, nil
	}
}

//export hs_free
func hs_free(s *C.char) { C.free(unsafe.Pointer(s)) }

//export hs_init
func hs_init(out *C.int64_t) *C.char {
	if out == nil {
		return cerr(errors.New("hetsync hs_init: NULL result pointer"))
	}
	c, err := hetsync.Init(ctx())
	if err != nil {
		return cerr(err)
	}
	*out = C.int64_t(comms.put(c))
	return nil
}

//export hs_info
func hs_info(id C.int64_t, rank, size, localRank, localSize *C.int) *C.char {
	c, err := comm(id, "hs_info")
	if err != nil {
		return cerr(err)
	}
	for _, f := range []struct {
		p *C.int
		v int
	}{{rank, c.Rank()}, {size, c.Size()}, {localRank, c.LocalRank()}, {localSize, c.LocalSize()}} {
		if f.p != nil {
			*f.p = C.int(f.v)
		}
	}
	return nil
}

//export hs_settings
func hs_settings(id C.int64_t) *C.char {
	c, err := comm(id, "hs_settings")
	if err != nil {
		return nil
	}
	return C.CString(fmt.Sprint(c.Settings()))
}

//export hs_split
func hs_split(id C.int64_t, color, key C.int, out *C.int64_t) *C.char {
	c, err := comm(id, "hs_split")
	if err != nil {
		return cerr(err)
	}
	if out == nil {
		return cerr(errors.New("hetsync hs_split: NULL result pointer"))
	}
	sub, err := c.Split(ctx(), int(color), int(key))
	if err != nil {
		return cerr(err)
	}
	*out = 0
	if sub != nil {
		*out = C.int64_t(comms.put(sub))
	}
	return nil
}

//export hs_close
func hs_close(id C.int64_t) *C.char {
	c, err := comm(id, "hs_close")
	if err != nil {
		return cerr(err)
	}
	comms.drop(int64(id))
	return cerr(c.Close())
}

//export hs_wait
func hs_wait(id C.int64_t, waitMS C.int64_t, done *C.int) *C.char {
	r, ok := requests.get(int64(id))
	if !ok {
		return cerr(fmt.Errorf("hetsync hs_wait: request %d is not pending (already completed, or never issued)", int64(id)))
	}
	fin, err := await(r, int64(waitMS))
	if done != nil {
		*done = 0
		if fin {
			*done = 1
		}
	}
	if fin {
		requests.drop(int64(id))
	}
	return cerr(err)
}

//export hs_allreduce
func hs_allreduce(id C.int64_t, p unsafe.Pointer, count C.int64_t, dtype, op C.int, waitMS C.int64_t, req *C.int64_t) *C.char {
	c, buf, o, err := reduceArgs(id, p, count, dtype, op, "hs_allreduce")
	if err != nil {
		return cerr(err)
	}
	return issue(waitMS, req, func() error { return c.AllReduce(ctx(), buf, o) },
		func() pending { return c.IAllReduce(ctx(), buf, o) })
}

//export hs_reduce_scatter
func hs_reduce_scatter(id C.int64_t, p unsafe.Pointer, count C.int64_t, dtype, op C.int, waitMS C.int64_t, req *C.int64_t) *C.char {
	c, buf, o, err := reduceArgs(id, p, count, dtype, op, "hs_reduce_scatter")
	if err != nil {
		return cerr(err)
	}
	return issue(waitMS, req, func() error { return c.ReduceScatter(ctx(), buf, o) },
		func() pending { return c.IReduceScatter(ctx(), buf, o) })
}

//export hs_reduce
func hs_reduce(id C.int64_t, p unsafe.Pointer, count C.int64_t, dtype, op, root C.int, waitMS C.int64_t, req *C.int64_t) *C.char {
	c, buf, o, err := reduceArgs(id, p, count, dtype, op, "hs_reduce")
	if err != nil {
		return cerr(err)
	}
	return issue(waitMS, req, func() error { return c.Reduce(ctx(), buf, o, int(root)) },
		func() pending { return c.IReduce(ctx(), buf, o, int(root)) })
}

//export hs_allgather
func hs_allgather(id C.int64_t, p unsafe.Pointer, count C.int64_t, dtype C.int, waitMS C.int64_t, req *C.int64_t) *C.char {
	c, buf, err := bufArgs(id, p, count, dtype, "hs_allgather")
	if err != nil {
		return cerr(err)
	}
	return issue(waitMS, req, func() error { return c.AllGather(ctx(), buf) },
		func() pending { return c.IAllGather(ctx(), buf) })
}

//export hs_broadcast
func hs_broadcast(id C.int64_t, p unsafe.Pointer, count C.int64_t, dtype, root C.int, waitMS C.int64_t, req *C.int64_t) *C.char {
	c, buf, err := bufArgs(id, p, count, dtype, "hs_broadcast")
	if err != nil {
		return cerr(err)
	}
	return issue(waitMS, req, func() error { return c.Broadcast(ctx(), buf, int(root)) },
		func() pending { return c.IBroadcast(ctx(), buf, int(root)) })
}

//export hs_alltoall
func hs_alltoall(id C.int64_t, send, recv unsafe.Pointer, count C.int64_t, dtype C.int, waitMS C.int64_t, req *C.int64_t) *C.char {
	c, rbuf, err := bufArgs(id, recv, count, dtype, "hs_alltoall")
	if err != nil {
		return cerr(err)
	}
	sbuf, err := buffer(send, count, dtype, "hs_alltoall")
	if err != nil {
		return cerr(err)
	}
	return issue(waitMS, req, func() error { return c.AllToAll(ctx(), sbuf, rbuf) },
		func() pending { return c.IAllToAll(ctx(), sbuf, rbuf) })
}

//export hs_barrier
func hs_barrier(id C.int64_t, waitMS C.int64_t, req *C.int64_t) *C.char {
	c, err := comm(id, "hs_barrier")
	if err != nil {
		return cerr(err)
	}
	return issue(waitMS, req, func() error { return c.Barrier(ctx()) },
		func() pending { return c.IBarrier(ctx()) })
}

//export hs_send
func hs_send(id C.int64_t, p unsafe.Pointer, count C.int64_t, dtype, peer C.int, waitMS C.int64_t, req *C.int64_t) *C.char {
	c, buf, err := bufArgs(id, p, count, dtype, "hs_send")
	if err != nil {
		return cerr(err)
	}
	return issue(waitMS, req, func() error { return c.Send(ctx(), int(peer), buf) },
		func() pending { return c.ISend(ctx(), int(peer), buf) })
}

//export hs_recv
func hs_recv(id C.int64_t, p unsafe.Pointer, count C.int64_t, dtype, peer C.int, waitMS C.int64_t, req *C.int64_t) *C.char {
	c, buf, err := bufArgs(id, p, count, dtype, "hs_recv")
	if err != nil {
		return cerr(err)
	}
	return issue(waitMS, req, func() error { return c.Recv(ctx(), int(peer), buf) },
		func() pending { return c.IRecv(ctx(), int(peer), buf) })
}

func bufArgs(id C.int64_t, p unsafe.Pointer, count C.int64_t, dtype C.int, call string) (*hetsync.Comm, collective.Buffer, error) {
	c, err := comm(id, call)
	if err != nil {
		return nil, collective.Buffer{}, err
	}
	buf, err := buffer(p, count, dtype, call)
	return c, buf, err
}

func reduceArgs(id C.int64_t, p unsafe.Pointer, count C.int64_t, dtype, op C.int, call string) (*hetsync.Comm, collective.Buffer, collective.ReduceOp, error) {
	c, buf, err := bufArgs(id, p, count, dtype, call)
	if err != nil {
		return nil, buf, 0, err
	}
	o, err := reduceOp(op, call)
	return c, buf, o, err
}
