package bench

import (
	"context"
	"fmt"
	"math"
	"unsafe"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/transport"
)

// refComm is a deliberately naive communicator over a transport.Endpoint (everything through
// rank 0, or direct exchanges), used to test the benchmark's own logic independently of the
// collective package's algorithms. corruptRank, when >= 0, adds 1 to element 0 of that rank's
// result of every collective except Barrier, so tests can check that wrong results are counted.
type refComm struct {
	ep          transport.Endpoint
	seq         uint64
	corruptRank int
}

func (c *refComm) Rank() int         { return c.ep.Rank() }
func (c *refComm) Size() int         { return c.ep.Size() }
func (c *refComm) Algorithm() string { return "reference" }

func f32(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// refChannel carries the reference communicator's messages; it has the endpoint to itself.
const refChannel transport.Channel = 0

func (c *refComm) hdr(op uint32) transport.Header {
	c.seq++
	return transport.Header{Channel: refChannel, Seq: c.seq, Op: op}
}

func (c *refComm) corrupt(buf collective.Buffer) {
	if c.Rank() == c.corruptRank && buf.DType == collective.Float32 && buf.Len() > 0 {
		f32(buf.Bytes)[0]++
	}
}

func (c *refComm) send(ctx context.Context, to int, h transport.Header, b []byte) error {
	return c.ep.Send(ctx, to, h, b)
}

func (c *refComm) recv(ctx context.Context, from int, h transport.Header, b []byte) error {
	n, err := c.ep.Recv(ctx, from, h, b)
	if err == nil && n != len(b) {
		err = fmt.Errorf("rank %d: got %d bytes from %d, want %d", c.Rank(), n, from, len(b))
	}
	return err
}

func (c *refComm) AllReduce(ctx context.Context, buf collective.Buffer, op collective.ReduceOp) error {
	if err := c.allReduce(ctx, buf, op); err != nil {
		return err
	}
	c.corrupt(buf)
	return nil
}

func (c *refComm) allReduce(ctx context.Context, buf collective.Buffer, op collective.ReduceOp) error {
	h := c.hdr(1)
	p := c.Size()
	if c.Rank() != 0 {
		if err := c.send(ctx, 0, h, buf.Bytes); err != nil {
			return err
		}
		return c.recv(ctx, 0, h, buf.Bytes)
	}
	if buf.DType != collective.Float32 && buf.DType != collective.Float64 {
		return fmt.Errorf("refComm: dtype %v", buf.DType)
	}
	tmp := make([]byte, len(buf.Bytes))
	for r := 1; r < p; r++ {
		if err := c.recv(ctx, r, h, tmp); err != nil {
			return err
		}
		if buf.DType == collective.Float64 {
			dst := unsafe.Slice((*float64)(unsafe.Pointer(&buf.Bytes[0])), len(buf.Bytes)/8)
			src := unsafe.Slice((*float64)(unsafe.Pointer(&tmp[0])), len(tmp)/8)
			for i := range dst {
				dst[i] += src[i] // only Sum is used on float64 here
			}
			continue
		}
		dst, src := f32(buf.Bytes), f32(tmp)
		for i := range dst {
			switch op {
			case collective.Sum, collective.Avg:
				dst[i] += src[i]
			case collective.Min:
				dst[i] = float32(math.Min(float64(dst[i]), float64(src[i])))
			case collective.Max:
				dst[i] = float32(math.Max(float64(dst[i]), float64(src[i])))
			case collective.Prod:
				dst[i] *= src[i]
			}
		}
	}
	if op == collective.Avg && buf.DType == collective.Float32 {
		for i, v := range f32(buf.Bytes) {
			f32(buf.Bytes)[i] = v / float32(p)
		}
	}
	for r := 1; r < p; r++ {
		if err := c.send(ctx, r, h, buf.Bytes); err != nil {
			return err
		}
	}
	return nil
}

func (c *refComm) ReduceScatter(ctx context.Context, buf collective.Buffer, op collective.ReduceOp) error {
	if err := c.allReduce(ctx, buf, op); err != nil {
		return err
	}
	lo, hi := collective.Partition(buf.Len(), c.Size(), c.Rank())
	c.corrupt(buf.Slice(lo, hi))
	return nil
}

func (c *refComm) AllGather(ctx context.Context, buf collective.Buffer) error {
	h := c.hdr(2)
	p, me := c.Size(), c.Rank()
	lo, hi := collective.Partition(buf.Len(), p, me)
	for r := 0; r < p; r++ {
		if r != me {
			if err := c.send(ctx, r, h, buf.Slice(lo, hi).Bytes); err != nil {
				return err
			}
		}
	}
	for r := 0; r < p; r++ {
		if r != me {
			l, h2 := collective.Partition(buf.Len(), p, r)
			if err := c.recv(ctx, r, h, buf.Slice(l, h2).Bytes); err != nil {
				return err
			}
		}
	}
	if buf.DType == collective.Float32 {
		c.corrupt(buf)
	}
	return nil
}

func (c *refComm) Broadcast(ctx context.Context, buf collective.Buffer, root int) error {
	h := c.hdr(3)
	if c.Rank() == root {
		for r := 0; r < c.Size(); r++ {
			if r != root {
				if err := c.send(ctx, r, h, buf.Bytes); err != nil {
					return err
				}
			}
		}
	} else if err := c.recv(ctx, root, h, buf.Bytes); err != nil {
		return err
	}
	c.corrupt(buf)
	return nil
}

func (c *refComm) AllToAll(ctx context.Context, send, recv collective.Buffer) error {
	h := c.hdr(4)
	p := c.Size()
	for r := 0; r < p; r++ {
		lo, hi := collective.Partition(send.Len(), p, r)
		if err := c.send(ctx, r, h, send.Slice(lo, hi).Bytes); err != nil {
			return err
		}
	}
	for r := 0; r < p; r++ {
		lo, hi := collective.Partition(recv.Len(), p, r)
		if err := c.recv(ctx, r, h, recv.Slice(lo, hi).Bytes); err != nil {
			return err
		}
	}
	c.corrupt(recv)
	return nil
}

func (c *refComm) Barrier(ctx context.Context) error {
	return c.allReduce(ctx, collective.Buffer{DType: collective.Float32, Bytes: []byte{}}, collective.Sum)
}
