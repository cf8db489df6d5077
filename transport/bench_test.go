package transport

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"testing"
)

var benchSizes = []int{64 << 10, 1 << 20, 16 << 20}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// benchStream measures one-way throughput from rank 0 to rank 1 over kind connections.
func benchStream(b *testing.B, kind string, opts StreamOptions) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			eps := streamJob(b, kind, 2, opts, nil)
			ctx := context.Background()
			msg := payloadOf(size, 1)
			done := make(chan error, 1)
			b.SetBytes(int64(size))
			b.ResetTimer()
			go func() {
				buf := make([]byte, size)
				for i := 0; i < b.N; i++ {
					if _, err := eps[1].Recv(ctx, 0, Header{}, buf); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			for i := 0; i < b.N; i++ {
				if err := eps[0].Send(ctx, 1, Header{}, msg); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

func BenchmarkStreamTCP(b *testing.B)  { benchStream(b, "tcp", DefaultStreamOptions()) }
func BenchmarkStreamUnix(b *testing.B) { benchStream(b, "unix", DefaultStreamOptions()) }

// BenchmarkStreamSockBuf4M sets 4 MiB kernel socket buffers.
func BenchmarkStreamSockBuf4M(b *testing.B) {
	opts := DefaultStreamOptions()
	opts.SocketBuffer = 4 << 20
	b.Run("tcp", func(b *testing.B) { benchStream(b, "tcp", opts) })
	b.Run("unix", func(b *testing.B) { benchStream(b, "unix", opts) })
}

// BenchmarkStreamTCPNoChecksum is the stream without payload checksums, for trusted links.
func BenchmarkStreamTCPNoChecksum(b *testing.B) {
	opts := DefaultStreamOptions()
	opts.Checksum = false
	benchStream(b, "tcp", opts)
}

// benchRaw is the baseline: the same messages written to and read from a bare connection.
func benchRaw(b *testing.B, kind string) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			w, r := connPair(b, kind)
			defer w.Close()
			defer r.Close()
			msg := payloadOf(size, 1)
			done := make(chan error, 1)
			b.SetBytes(int64(size))
			b.ResetTimer()
			go func() {
				buf := make([]byte, size)
				for i := 0; i < b.N; i++ {
					if _, err := io.ReadFull(r, buf); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			for i := 0; i < b.N; i++ {
				if _, err := w.Write(msg); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

func BenchmarkRawTCP(b *testing.B)  { benchRaw(b, "tcp") }
func BenchmarkRawUnix(b *testing.B) { benchRaw(b, "unix") }

// ringAllReduce is a plain segmented ring allreduce (sum of float32) over an endpoint, here
// only to check that the stream transport can carry the collectives' target rates.
func ringAllReduce(ctx context.Context, ep Endpoint, data []byte, tmp []byte, seg int) error {
	p, r := ep.Size(), ep.Rank()
	if p == 1 {
		return nil
	}
	next, prev := (r+1)%p, (r+p-1)%p
	n := len(data) / 4
	block := func(i int) []byte {
		lo, hi := i*n/p, (i+1)*n/p
		return data[4*lo : 4*hi]
	}
	var seq uint64
	step := func(sendIdx, recvIdx int, reduce bool) error {
		src, dst := block(sendIdx), block(recvIdx)
		seq++
		errc := make(chan error, 1)
		go func() {
			for off, s := 0, uint32(0); off < len(src) || off == 0; off, s = off+seg, s+1 {
				end := min(off+seg, len(src))
				if err := ep.Send(ctx, next, Header{Seq: seq, Segment: s}, src[off:end]); err != nil {
					errc <- err
					return
				}
				if end == len(src) {
					break
				}
			}
			errc <- nil
		}()
		for off, s := 0, uint32(0); off < len(dst) || off == 0; off, s = off+seg, s+1 {
			end := min(off+seg, len(dst))
			into := dst[off:end]
			if reduce {
				into = tmp[:end-off]
			}
			if _, err := ep.Recv(ctx, prev, Header{Seq: seq, Segment: s}, into); err != nil {
				return err
			}
			if reduce {
				d := dst[off:end]
				for i := 0; i+4 <= len(into); i += 4 {
					v := math.Float32frombits(binary.LittleEndian.Uint32(d[i:])) +
						math.Float32frombits(binary.LittleEndian.Uint32(into[i:]))
					binary.LittleEndian.PutUint32(d[i:], math.Float32bits(v))
				}
			}
			if end == len(dst) {
				break
			}
		}
		return <-errc
	}
	for s := 0; s < p-1; s++ {
		if err := step((r-s+p)%p, (r-s-1+2*p)%p, true); err != nil {
			return err
		}
	}
	for s := 0; s < p-1; s++ {
		if err := step((r+1-s+p)%p, (r-s+p)%p, false); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkStreamRingAllReduce runs a 64 MiB float32 ring allreduce on 4 ranks over TCP
// loopback and reports the bus bandwidth (nccl-tests convention: 2(p-1)/p * bytes / time).
func BenchmarkStreamRingAllReduce(b *testing.B) {
	const p, size, seg = 4, 64 << 20, 1 << 20
	for _, kind := range []string{"tcp", "unix"} {
		b.Run(kind, func(b *testing.B) {
			eps := streamJob(b, kind, p, DefaultStreamOptions(), nil)
			ctx := context.Background()
			bufs := make([][]byte, p)
			tmps := make([][]byte, p)
			for r := range bufs {
				bufs[r] = gradient(size/4, uint64(r))
				tmps[r] = make([]byte, seg)
			}
			b.SetBytes(size)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				errc := make(chan error, p)
				for r := 0; r < p; r++ {
					go func() { errc <- ringAllReduce(ctx, eps[r], bufs[r], tmps[r], seg) }()
				}
				for r := 0; r < p; r++ {
					if err := <-errc; err != nil {
						b.Fatal(err)
					}
				}
			}
			sec := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(2*float64(p-1)/float64(p)*size/sec/1e9, "busbw-GB/s")
		})
	}
}

// TestRingAllReduceOverStream checks the benchmark's allreduce, so that its numbers mean
// something: every rank ends with the elementwise sum.
func TestRingAllReduceOverStream(t *testing.T) {
	for _, p := range []int{1, 2, 3, 5} {
		for _, kind := range []string{"pipe", "tcp"} {
			t.Run(fmt.Sprintf("%s/p=%d", kind, p), func(t *testing.T) {
				var eps []Endpoint
				if p == 1 {
					ep, err := NewStreamEndpoint(0, 1, []io.ReadWriteCloser{nil}, DefaultStreamOptions())
					if err != nil {
						t.Fatal(err)
					}
					eps = []Endpoint{ep}
				} else {
					eps = streamJob(t, kind, p, DefaultStreamOptions(), nil)
				}
				const n = 10007
				bufs := make([][]byte, p)
				want := make([]float32, n)
				for r := range bufs {
					vals := make([]float32, n)
					for i := range vals {
						vals[i] = float32(r*n + i)
						want[i] += vals[i]
					}
					bufs[r] = f32Bytes(vals...)
				}
				errc := make(chan error, p)
				for r := 0; r < p; r++ {
					go func() { errc <- ringAllReduce(context.Background(), eps[r], bufs[r], make([]byte, 4096), 4096) }()
				}
				for r := 0; r < p; r++ {
					if err := <-errc; err != nil {
						t.Fatal(err)
					}
				}
				for r := range bufs {
					got := bytesF32(bufs[r])
					for i := range want {
						if got[i] != want[i] {
							t.Fatalf("rank %d element %d: %g, want %g", r, i, got[i], want[i])
						}
					}
				}
			})
		}
	}
}
