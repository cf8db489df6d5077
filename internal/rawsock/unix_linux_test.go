//go:build linux

package rawsock

import (
	"errors"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// A Sock's Read is what a transport/shm pipe's doorbell watcher reads its Unix socket link
// with: it must return what was written, wait (parked, not failing) while nothing was, and
// end as the link's own Read would.
func TestReadUnixLink(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write string
		end   func(mine, peer net.Conn)
		want  func(error) bool
	}{
		{"peer closes", "r", func(_, peer net.Conn) { peer.Close() }, func(err error) bool { return errors.Is(err, io.EOF) }},
		{"both bells then peer closes", "rw", func(_, peer net.Conn) { peer.Close() }, func(err error) bool { return errors.Is(err, io.EOF) }},
		{"this end closes", "wrr", func(mine, _ net.Conn) { mine.Close() }, func(err error) bool { return errors.Is(err, net.ErrClosed) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A Unix stream socket, as a transport/shm pipe's doorbell link is.
			mine, peer := connPair(t, "unix", filepath.Join(t.TempDir(), "link"))
			s := New(mine)
			if s == nil {
				t.Fatal("no raw access to a Unix socket")
			}
			read := s.Read
			if _, err := peer.Write([]byte(tc.write)); err != nil {
				t.Fatal(err)
			}
			var got []byte
			b := make([]byte, 64)
			for len(got) < len(tc.write) {
				n, err := read(b)
				if err != nil {
					t.Fatalf("read after %q: %v", got, err)
				}
				got = append(got, b[:n]...)
			}
			if string(got) != tc.write {
				t.Fatalf("read %q, want %q", got, tc.write)
			}
			if n, err := read(b[:0]); n != 0 || err != nil {
				t.Fatalf("empty read: %d, %v", n, err)
			}
			// Nothing to read: the reader waits until the link ends, then reports how.
			done := make(chan error, 1)
			go func() {
				_, err := read(b)
				done <- err
			}()
			select {
			case err := <-done:
				t.Fatalf("read returned %v with nothing written", err)
			case <-time.After(20 * time.Millisecond):
			}
			tc.end(mine, peer)
			select {
			case err := <-done:
				if !tc.want(err) {
					t.Fatalf("read after the end: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("read did not return after the link ended")
			}
		})
	}
}
