package transport

import (
	"math/bits"
	"sync"
)

// bufPool recycles payload buffers in power-of-two size classes from 4 KiB up.
type bufPool struct {
	classes [33]sync.Pool
}

type pooledBuf struct{ b []byte }

const minPoolClass = 12

func poolClass(n int) int {
	if n <= 1<<minPoolClass {
		return minPoolClass
	}
	return bits.Len(uint(n - 1))
}

func (bp *bufPool) get(n int) *pooledBuf {
	c := poolClass(n)
	if v := bp.classes[c].Get(); v != nil {
		pb := v.(*pooledBuf)
		pb.b = pb.b[:n]
		return pb
	}
	return &pooledBuf{b: make([]byte, n, 1<<c)}
}

func (bp *bufPool) put(pb *pooledBuf) {
	if pb == nil {
		return
	}
	c := poolClass(cap(pb.b))
	if 1<<c != cap(pb.b) {
		return
	}
	bp.classes[c].Put(pb)
}
