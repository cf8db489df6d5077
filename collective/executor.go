package collective

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	"github.com/hetsync/hetsync/kernels"
	"github.com/hetsync/hetsync/transport"
)

// execute runs one rank's schedule. Sends run on their own goroutine in schedule order, each
// one as soon as the receives it reads from have completed; receives run on the calling
// goroutine in schedule order, each one as soon as the sends that read the range it overwrites
// have completed. Both lists are segmented, so several segments are in flight at once: while
// segment s of step k is being reduced here, segment s-1 of step k+1 is already on the wire.
// A receive goes straight into the caller's buffer unless it must be reduced, in which case it
// lands in the Comm's pooled temp buffer first.
func (c *Comm) execute(ctx context.Context, s *schedule, buf, aux Buffer, op ReduceOp, h transport.Header) error {
	if len(s.sends) == 0 && len(s.recvs) == 0 {
		return nil
	}
	// One cancellable context per call: whichever side fails first stops the other, even when
	// it is blocked inside the transport.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.cancelCall = cancel
	c.sendsDone.Store(0)
	c.recvsDone.Store(0)
	drain(c.sendSig)
	drain(c.recvSig)
	go c.sendLoop(ctx, s, buf, aux, h)

	rerr := c.recvLoop(ctx, s, buf, op, h)
	if rerr != nil {
		cancel()
	}
	serr := <-c.senderDone
	switch {
	case serr == nil:
		return rerr
	case rerr == nil || errors.Is(rerr, context.Canceled):
		// The receiver only stopped because the sender failed: report the sender's cause.
		return serr
	case errors.Is(serr, context.Canceled):
		return rerr
	}
	return errors.Join(rerr, serr)
}

func drain(ch chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (c *Comm) sendLoop(ctx context.Context, s *schedule, buf, aux Buffer, h transport.Header) {
	es := buf.DType.Size()
	for i := range s.sends {
		st := &s.sends[i]
		for c.recvsDone.Load() < int64(st.need) {
			select {
			case <-c.recvSig:
			case <-ctx.Done():
				c.senderDone <- ctx.Err()
				return
			}
		}
		src := buf.Bytes
		if st.aux {
			src = aux.Bytes
		}
		h.Segment = st.tag
		if err := c.ep.Send(ctx, st.peer, h, src[st.lo*es:st.hi*es]); err != nil {
			c.cancelCall()
			c.senderDone <- fmt.Errorf("sending [%d,%d) to rank %d: %w", st.lo, st.hi, st.peer, err)
			return
		}
		c.sendsDone.Add(1)
		notify(c.sendSig)
	}
	c.senderDone <- nil
}

func (c *Comm) recvLoop(ctx context.Context, s *schedule, buf Buffer, op ReduceOp, h transport.Header) error {
	es := buf.DType.Size()
	var temp []byte
	if s.maxTemp > 0 {
		temp = unsafe.Slice((*byte)(unsafe.Pointer(&c.temp[0])), s.maxTemp*es)
	}
	for i := range s.recvs {
		st := &s.recvs[i]
		for c.sendsDone.Load() < int64(st.need) {
			select {
			case <-c.sendSig:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		dst := buf.Bytes[st.lo*es : st.hi*es]
		into := dst
		if st.kind == stepRecvReduce {
			into = temp[:len(dst)]
		}
		h.Segment = st.tag
		if err := c.recvExact(ctx, st.peer, h, into); err != nil {
			return fmt.Errorf("receiving [%d,%d) from rank %d: %w", st.lo, st.hi, st.peer, err)
		}
		if st.kind == stepRecvReduce {
			reduceBytes(buf.DType, op, dst, into)
		}
		c.recvsDone.Add(1)
		notify(c.recvSig)
	}
	return nil
}

func view[T any](b []byte) []T {
	if len(b) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/int(unsafe.Sizeof(z)))
}

// reduceBytes sets dst = dst op src element-wise. Avg reduces as Sum; the division comes after.
func reduceBytes(dt DType, op ReduceOp, dst, src []byte) {
	switch dt {
	case Float32:
		reduceTyped(op, view[float32](dst), view[float32](src))
	case Float64:
		reduceTyped(op, view[float64](dst), view[float64](src))
	case Int32:
		reduceTyped(op, view[int32](dst), view[int32](src))
	case Int64:
		reduceTyped(op, view[int64](dst), view[int64](src))
	}
}

func reduceTyped[T kernels.ReduceElem](op ReduceOp, dst, src []T) {
	switch op {
	case Sum, Avg:
		kernels.ReduceAdd(dst, src)
	case Min:
		kernels.ReduceMin(dst, src)
	case Max:
		kernels.ReduceMax(dst, src)
	case Prod:
		kernels.ReduceProd(dst, src)
	}
}

// average divides a summed buffer by p.
func average(b Buffer, p int) {
	switch b.DType {
	case Float32:
		kernels.ReduceScale(view[float32](b.Bytes), 1/float32(p))
	case Float64:
		kernels.ReduceScale(view[float64](b.Bytes), 1/float64(p))
	case Int32:
		kernels.ReduceDiv(view[int32](b.Bytes), int32(p))
	case Int64:
		kernels.ReduceDiv(view[int64](b.Bytes), int64(p))
	}
}

// recvExact receives the message want describes into buf, which it must fill exactly. It uses
// RecvAny and checks the header itself so that a peer running another collective is reported as
// a *transport.MismatchError even when its message would not fit buf (the transports check the
// size first). On error buf may hold part of the foreign message.
func (c *Comm) recvExact(ctx context.Context, from int, want transport.Header, buf []byte) error {
	got, n, err := c.ep.RecvAny(ctx, from, want.Channel, buf)
	if err == nil && got.Op == abortOp {
		return fmt.Errorf("rank %d gave up on the collective (see its error): %w", from,
			&transport.MismatchError{Rank: c.Rank(), Peer: from, Want: want, Got: got})
	}
	if err != nil {
		if got != (transport.Header{}) {
			if merr := transport.CheckHeader(c.Rank(), from, want, got); merr != nil {
				return errors.Join(merr, err)
			}
		}
		return err
	}
	if err := transport.CheckHeader(c.Rank(), from, want, got); err != nil {
		return err
	}
	if n != len(buf) {
		return fmt.Errorf("got %d bytes, want %d", n, len(buf))
	}
	return nil
}
