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

	"github.com/hetsync/hetsync/service/store"
)

// The job's key-value store (service/store) through the C ABI: the store torch.distributed's
// rendezvous uses under the Python package. A store belongs to a communicator, one at most
// (two would share the service's channel), and is held by the communicator's rank 0.
var (
	stores     handles[*store.Store]
	storeMu    sync.Mutex
	storeComms = map[int64]int64{} // communicator id → its store's id
	storeOwner = map[int64]int64{} // store id → its communicator's id
)

func storeOf(id C.int64_t, call string) (*store.Store, error) {
	s, ok := stores.get(int64(id))
	if !ok {
		return nil, fmt.Errorf("hetsync %s: store %d is not open (closed, or never returned by hs_store_new)", call, int64(id))
	}
	return s, nil
}

// cbytes views n bytes of the caller's memory at p, for a call that copies them before it
// returns.
func cbytes(p unsafe.Pointer, n C.int64_t, what, call string) ([]byte, error) {
	switch {
	case n < 0:
		return nil, fmt.Errorf("hetsync %s: negative length %d of the %s", call, int64(n), what)
	case n == 0:
		return nil, nil
	case p == nil:
		return nil, fmt.Errorf("hetsync %s: NULL %s of %d bytes", call, what, int64(n))
	}
	return unsafe.Slice((*byte)(p), int(n)), nil
}

// ckeys copies n keys given as pointers and lengths.
func ckeys(keys *unsafe.Pointer, lens *C.int64_t, n C.int64_t, call string) ([]string, error) {
	if n < 0 || n > 0 && (keys == nil || lens == nil) {
		return nil, fmt.Errorf("hetsync %s: %d keys at %p with lengths at %p", call, int64(n), keys, lens)
	}
	ps, ls := unsafe.Slice(keys, int(n)), unsafe.Slice(lens, int(n))
	out := make([]string, n)
	for i := range out {
		b, err := cbytes(ps[i], ls[i], fmt.Sprintf("key %d", i), call)
		if err != nil {
			return nil, err
		}
		out[i] = string(b)
	}
	return out, nil
}

// storeCall runs fn on store id as a pending call (see issue): a get or wait blocks until
// another rank sets its keys, and every call may wait on the holder, so the caller waits in
// slices. The results fn writes through the caller's pointers are written when it completes.
// fn's context ends after timeoutMS when that is positive: the bound of a call that waits
// only for the holder's answer (a holder that has not started its store yet, say); get and
// wait pass 0, since the holder itself ends them at their timeout, with an error naming
// their keys.
func storeCall(id C.int64_t, call string, timeoutMS, waitMS C.int64_t, req *C.int64_t, fn func(context.Context, *store.Store) error) *C.char {
	s, err := storeOf(id, call)
	if err != nil {
		return cerr(err)
	}
	run := func() error {
		c, cancel := withMillis(timeoutMS)
		defer cancel()
		return fn(c, s)
	}
	return issue(waitMS, req, run, func() pending { return goTask(run) })
}

// withMillis is a context that ends after ms milliseconds, or never when ms <= 0.
func withMillis(ms C.int64_t) (context.Context, context.CancelFunc) {
	if ms <= 0 {
		return ctx(), func() {}
	}
	return context.WithTimeout(ctx(), millis(ms))
}

// setBytes hands v to the caller as C memory (hs_free releases it); NULL when v is empty.
func setBytes(v []byte, out *unsafe.Pointer, n *C.int64_t) {
	*n = C.int64_t(len(v))
	*out = nil
	if len(v) > 0 {
		*out = C.CBytes(v)
	}
}

func millis(ms C.int64_t) time.Duration { return time.Duration(ms) * time.Millisecond }

//export hs_store_new
func hs_store_new(commID C.int64_t, out *C.int64_t) *C.char {
	const call = "hs_store_new"
	c, err := comm(commID, call)
	if err != nil {
		return cerr(err)
	}
	if out == nil {
		return cerr(errors.New("hetsync hs_store_new: NULL result pointer"))
	}
	storeMu.Lock()
	defer storeMu.Unlock()
	if id, ok := storeComms[int64(commID)]; ok {
		return cerr(fmt.Errorf("hetsync %s: rank %d: communicator %d already has store %d", call, c.Rank(), int64(commID), id))
	}
	// The store lives until hs_store_close, beyond any one call.
	s, err := store.Start(context.Background(), c.Endpoint(), store.Config{})
	if err != nil {
		return cerr(err)
	}
	id := stores.put(s)
	storeComms[int64(commID)], storeOwner[id] = id, int64(commID)
	*out = C.int64_t(id)
	return nil
}

//export hs_store_set
func hs_store_set(id C.int64_t, key unsafe.Pointer, klen C.int64_t, val unsafe.Pointer, vlen, timeoutMS, waitMS C.int64_t, req *C.int64_t) *C.char {
	const call = "hs_store_set"
	k, err := cbytes(key, klen, "key", call)
	if err != nil {
		return cerr(err)
	}
	v, err := cbytes(val, vlen, "value", call)
	if err != nil {
		return cerr(err)
	}
	ks, vs := string(k), append([]byte{}, v...)
	return storeCall(id, call, timeoutMS, waitMS, req, func(c context.Context, s *store.Store) error { return s.Set(c, ks, vs) })
}

//export hs_store_get
func hs_store_get(id C.int64_t, key unsafe.Pointer, klen, timeoutMS C.int64_t, val *unsafe.Pointer, vlen *C.int64_t, waitMS C.int64_t, req *C.int64_t) *C.char {
	const call = "hs_store_get"
	k, err := cbytes(key, klen, "key", call)
	if err != nil {
		return cerr(err)
	}
	if val == nil || vlen == nil {
		return cerr(errors.New("hetsync hs_store_get: NULL result pointer"))
	}
	ks := string(k)
	return storeCall(id, call, 0, waitMS, req, func(c context.Context, s *store.Store) error {
		v, err := s.Get(c, ks, millis(timeoutMS))
		if err == nil {
			setBytes(v, val, vlen)
		}
		return err
	})
}

//export hs_store_add
func hs_store_add(id C.int64_t, key unsafe.Pointer, klen, delta C.int64_t, sum *C.int64_t, timeoutMS, waitMS C.int64_t, req *C.int64_t) *C.char {
	const call = "hs_store_add"
	k, err := cbytes(key, klen, "key", call)
	if err != nil {
		return cerr(err)
	}
	if sum == nil {
		return cerr(errors.New("hetsync hs_store_add: NULL result pointer"))
	}
	ks := string(k)
	return storeCall(id, call, timeoutMS, waitMS, req, func(c context.Context, s *store.Store) error {
		n, err := s.Add(c, ks, int64(delta))
		*sum = C.int64_t(n)
		return err
	})
}

//export hs_store_compare_set
func hs_store_compare_set(id C.int64_t, key unsafe.Pointer, klen C.int64_t, expected unsafe.Pointer, elen C.int64_t, desired unsafe.Pointer, dlen C.int64_t,
	val *unsafe.Pointer, vlen *C.int64_t, timeoutMS, waitMS C.int64_t, req *C.int64_t) *C.char {
	const call = "hs_store_compare_set"
	var fields [3][]byte
	for i, f := range []struct {
		p    unsafe.Pointer
		n    C.int64_t
		what string
	}{{key, klen, "key"}, {expected, elen, "expected value"}, {desired, dlen, "desired value"}} {
		b, err := cbytes(f.p, f.n, f.what, call)
		if err != nil {
			return cerr(err)
		}
		fields[i] = append([]byte{}, b...)
	}
	if val == nil || vlen == nil {
		return cerr(errors.New("hetsync hs_store_compare_set: NULL result pointer"))
	}
	return storeCall(id, call, timeoutMS, waitMS, req, func(c context.Context, s *store.Store) error {
		v, err := s.CompareSet(c, string(fields[0]), fields[1], fields[2])
		if err == nil {
			setBytes(v, val, vlen)
		}
		return err
	})
}

//export hs_store_wait
func hs_store_wait(id C.int64_t, keys *unsafe.Pointer, lens *C.int64_t, n, timeoutMS, waitMS C.int64_t, req *C.int64_t) *C.char {
	const call = "hs_store_wait"
	ks, err := ckeys(keys, lens, n, call)
	if err != nil {
		return cerr(err)
	}
	return storeCall(id, call, 0, waitMS, req, func(c context.Context, s *store.Store) error { return s.Wait(c, ks, millis(timeoutMS)) })
}

//export hs_store_check
func hs_store_check(id C.int64_t, keys *unsafe.Pointer, lens *C.int64_t, n C.int64_t, ok *C.int, timeoutMS, waitMS C.int64_t, req *C.int64_t) *C.char {
	const call = "hs_store_check"
	ks, err := ckeys(keys, lens, n, call)
	if err != nil {
		return cerr(err)
	}
	if ok == nil {
		return cerr(errors.New("hetsync hs_store_check: NULL result pointer"))
	}
	return storeCall(id, call, timeoutMS, waitMS, req, func(c context.Context, s *store.Store) error {
		all, err := s.Check(c, ks)
		*ok = cbool(all)
		return err
	})
}

//export hs_store_delete_key
func hs_store_delete_key(id C.int64_t, key unsafe.Pointer, klen C.int64_t, deleted *C.int, timeoutMS, waitMS C.int64_t, req *C.int64_t) *C.char {
	const call = "hs_store_delete_key"
	k, err := cbytes(key, klen, "key", call)
	if err != nil {
		return cerr(err)
	}
	if deleted == nil {
		return cerr(errors.New("hetsync hs_store_delete_key: NULL result pointer"))
	}
	ks := string(k)
	return storeCall(id, call, timeoutMS, waitMS, req, func(c context.Context, s *store.Store) error {
		was, err := s.DeleteKey(c, ks)
		*deleted = cbool(was)
		return err
	})
}

//export hs_store_num_keys
func hs_store_num_keys(id C.int64_t, n *C.int64_t, timeoutMS, waitMS C.int64_t, req *C.int64_t) *C.char {
	if n == nil {
		return cerr(errors.New("hetsync hs_store_num_keys: NULL result pointer"))
	}
	return storeCall(id, "hs_store_num_keys", timeoutMS, waitMS, req, func(c context.Context, s *store.Store) error {
		k, err := s.NumKeys(c)
		*n = C.int64_t(k)
		return err
	})
}

//export hs_store_close
func hs_store_close(id C.int64_t, timeoutMS, waitMS C.int64_t, req *C.int64_t) *C.char {
	const call = "hs_store_close"
	s, err := storeOf(id, call)
	if err != nil {
		return cerr(err)
	}
	// The id is released at once, so that no call starts on a closing store.
	stores.drop(int64(id))
	storeMu.Lock()
	delete(storeComms, storeOwner[int64(id)])
	delete(storeOwner, int64(id))
	storeMu.Unlock()
	run := func() error {
		c, cancel := withMillis(timeoutMS)
		defer cancel()
		return s.Close(c)
	}
	return issue(waitMS, req, run, func() pending { return goTask(run) })
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
