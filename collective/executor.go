package collective

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	"github.com/hetsync/hetsync/kernels"
	"github.com/hetsync/hetsync/transport"
)

// execute runs one rank's schedule. Schedules whose messages are all at most inlineMaxBytes
// (every schedule with the default 1 MiB segments) run on the calling goroutine alone, see
// executeInline. Otherwise sends run on their own goroutine in schedule order, each one as soon
// as the receives it reads from have completed; receives run on the calling goroutine in
// schedule order, each one as soon as the sends that read the range it overwrites have
// completed. Both lists are segmented, so several segments are in flight at once: while
// segment s of step k is being reduced here, segment s-1 of step k+1 is already on the wire.
// A receive goes straight into the caller's buffer unless it must be reduced: then it is
// reduced from the endpoint's own buffer when the endpoint lends it (transport.Borrower), else
// it lands in the Comm's pooled temp buffer first.
func (c *Comm) execute(ctx context.Context, s *schedule, buf, aux Buffer, op ReduceOp, h transport.Header) error {
	if len(s.sends) == 0 && len(s.recvs) == 0 {
		return nil
	}
	if s.maxMsg*buf.DType.Size() <= inlineMaxBytes {
		return c.executeInline(ctx, s, buf, aux, op, h)
	}
	// One cancellable context per call: whichever side fails first stops the other, even when
	// it is blocked inside the transport. The Comm's own call context is cancellable already,
	// and cancelling it ends only this call (see deadlineCtx).
	var cancel context.CancelFunc
	if d, ok := ctx.(*deadlineCtx); ok {
		cancel = d.cancelFn
	} else {
		var stop context.CancelFunc
		ctx, stop = context.WithCancel(ctx)
		defer stop()
		cancel = stop
	}
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

// inlineMaxBytes is the message size up to which a schedule runs on the calling goroutine alone.
// Every hand-off between a sending and a receiving goroutine is a scheduler wake-up, while a
// send of up to a segment only copies it into the socket buffer and returns; the endpoint's
// reader goroutines keep receiving meanwhile (docs/results/collective-constants.md has the
// measurements). Running the steps in program order on one goroutine is deadlock-free because
// Endpoint.Send never waits for the receiver.
const inlineMaxBytes = 1 << 20

// executeInline runs the schedule on the calling goroutine: the next send as soon as the
// receives it reads from are complete, else the next receive.
func (c *Comm) executeInline(ctx context.Context, s *schedule, buf, aux Buffer, op ReduceOp, h transport.Header) error {
	es := buf.DType.Size()
	temp := c.tempBytes(s, es)
	si, ri := 0, 0
	for si < len(s.sends) || ri < len(s.recvs) {
		if si < len(s.sends) && s.sends[si].need <= ri {
			if err := c.sendStep(ctx, &s.sends[si], buf, aux, h); err != nil {
				return err
			}
			si++
			continue
		}
		if ri == len(s.recvs) || s.recvs[ri].need > si {
			// A well-formed schedule never gets here: every step waits only for earlier ones.
			return fmt.Errorf("rank %d: schedule stalled at send %d, receive %d", c.Rank(), si, ri)
		}
		if err := c.recvStep(ctx, &s.recvs[ri], buf, temp, op, h); err != nil {
			return err
		}
		ri++
	}
	return nil
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
		if err := c.sendStep(ctx, st, buf, aux, h); err != nil {
			c.cancelCall()
			c.senderDone <- err
			return
		}
		c.sendsDone.Add(1)
		notify(c.sendSig)
	}
	c.senderDone <- nil
}

func (c *Comm) sendStep(ctx context.Context, st *step, buf, aux Buffer, h transport.Header) error {
	es := buf.DType.Size()
	src := buf.Bytes
	if st.aux {
		src = aux.Bytes
	}
	h.Segment = st.tag
	c.sendPeer.Store(int32(st.peer))
	t0 := c.traceNow()
	payload := src[st.lo*es : st.hi*es]
	if !st.aux && c.zip.encodes(st.peer) {
		payload = c.zip.encodeSend(st, buf)
	}
	if err := c.ep.Send(ctx, st.peer, h, payload); err != nil {
		return fmt.Errorf("sending [%d,%d) to rank %d: %w", st.lo, st.hi, st.peer, err)
	}
	c.bytesSent.Add(int64(len(payload)))
	c.sentBy.Count(st.peer, len(payload))
	c.traceMessage(false, st.peer, len(payload), t0)
	c.sendPeer.Store(-1)
	return nil
}

// tempBytes is the Comm's pooled receive buffer for schedule s (not needed when the endpoint
// lends its payloads).
func (c *Comm) tempBytes(s *schedule, es int) []byte {
	if s.maxTemp == 0 || c.borrow != nil {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&c.temp[0])), s.maxTemp*es)
}

func (c *Comm) recvLoop(ctx context.Context, s *schedule, buf Buffer, op ReduceOp, h transport.Header) error {
	temp := c.tempBytes(s, buf.DType.Size())
	for i := range s.recvs {
		st := &s.recvs[i]
		for c.sendsDone.Load() < int64(st.need) {
			select {
			case <-c.sendSig:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := c.recvStep(ctx, st, buf, temp, op, h); err != nil {
			return err
		}
		c.recvsDone.Add(1)
		notify(c.recvSig)
	}
	return nil
}

// recvStep receives one message. A plain receive goes straight into the caller's buffer. A
// reduced one is reduced from the endpoint's own buffer when the endpoint lends it (no copy,
// and the endpoint's reader fills the next segment meanwhile), else from temp.
func (c *Comm) recvStep(ctx context.Context, st *step, buf Buffer, temp []byte, op ReduceOp, h transport.Header) error {
	c.recvPeer.Store(int32(st.peer))
	t0 := c.traceNow()
	err := c.receive(ctx, st, buf, temp, op, h)
	if err == nil {
		c.recvPeer.Store(-1) // on error it names the peer the call was waiting for
		c.traceMessage(true, st.peer, (st.hi-st.lo)*buf.DType.Size(), t0)
	}
	return err
}

func (c *Comm) receive(ctx context.Context, st *step, buf Buffer, temp []byte, op ReduceOp, h transport.Header) error {
	es := buf.DType.Size()
	dst := buf.Bytes[st.lo*es : st.hi*es]
	h.Segment = st.tag
	if c.zip.encodes(st.peer) {
		return c.receiveEncoded(ctx, st, buf, h)
	}
	if st.kind == stepRecvReduce && c.borrow != nil {
		got, payload, err := c.borrow.RecvBorrow(ctx, st.peer, h.Channel)
		if err == nil {
			err = c.checkRecv(st.peer, h, got, len(payload), len(dst))
			if err == nil {
				reduceBytes(buf.DType, op, dst, payload)
			}
			c.borrow.ReleaseBorrowed(st.peer, h.Channel)
		} else if got != (transport.Header{}) {
			if merr := transport.CheckHeader(c.Rank(), st.peer, h, got); merr != nil {
				err = errors.Join(merr, err)
			}
		}
		if err != nil {
			return fmt.Errorf("receiving [%d,%d) from rank %d: %w", st.lo, st.hi, st.peer, err)
		}
		return nil
	}
	into := dst
	if st.kind == stepRecvReduce {
		into = temp[:len(dst)]
	}
	if err := c.recvExact(ctx, st.peer, h, into); err != nil {
		return fmt.Errorf("receiving [%d,%d) from rank %d: %w", st.lo, st.hi, st.peer, err)
	}
	if st.kind == stepRecvReduce {
		reduceBytes(buf.DType, op, dst, into)
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
		return c.checkRecv(from, want, got, n, len(buf))
	}
	if err != nil {
		if got != (transport.Header{}) {
			if merr := transport.CheckHeader(c.Rank(), from, want, got); merr != nil {
				return errors.Join(merr, err)
			}
		}
		return err
	}
	return c.checkRecv(from, want, got, n, len(buf))
}

// checkRecv checks a received message: not a peer's abort notice, the expected header, the
// expected length.
func (c *Comm) checkRecv(from int, want, got transport.Header, n, size int) error {
	if got.Op == abortOp {
		return c.peerAborted(from, got.Seq)
	}
	if err := transport.CheckHeader(c.Rank(), from, want, got); err != nil {
		return err
	}
	if n != size {
		return fmt.Errorf("got %d bytes, want %d", n, size)
	}
	return nil
}
