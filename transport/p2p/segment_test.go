package p2p

import (
	"testing"

	"github.com/hetsync/hetsync/transport"
)

// TestLargeSegmentBytes checks that only an all-TCP endpoint of a job whose data path is "tcp"
// asks collectives for larger segments in large calls, also through transport.LargeSegment.
func TestLargeSegmentBytes(t *testing.T) {
	tests := []struct {
		path string
		want int
	}{
		{DataPathTCP, tcpLargeSegment},
		{DataPathAuto, 0},
		{DataPathUnix, 0},
		{DataPathShm, 0},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			eps := startJob(t, Config{Size: 3, Secret: "segment " + t.Name(), Security: SecurityNone, DataPath: tc.path}, nil)
			defer closeAll(eps)
			for r, ep := range eps {
				if got := transport.LargeSegment(ep); got != tc.want {
					t.Errorf("rank %d over %s (paths %q): large segment %d bytes, want %d", r, tc.path, ep.(*endpoint).DataPaths(), got, tc.want)
				}
			}
		})
	}
}
