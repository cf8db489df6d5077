package launcher

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseHostList(t *testing.T) {
	tests := []struct {
		in      string
		want    []Host
		errWant string
	}{
		{"host1:2,host2:2", []Host{{Name: "host1", Slots: 2}, {Name: "host2", Slots: 2}}, ""},
		{"a", []Host{{Name: "a", Slots: 1}}, ""},
		{" a:3 , b ", []Host{{Name: "a", Slots: 3}, {Name: "b", Slots: 1}}, ""},
		{"a:1,b:2,a:2", []Host{{Name: "a", Slots: 3}, {Name: "b", Slots: 2}}, ""},
		{"alice@node1:4", []Host{{Name: "node1", User: "alice", Slots: 4}}, ""},
		{"10.77.0.2:2,localhost:1", []Host{{Name: "10.77.0.2", Slots: 2}, {Name: "localhost", Slots: 1}}, ""},
		{"[fe80::1]:2,[::1]", []Host{{Name: "fe80::1", Slots: 2}, {Name: "::1", Slots: 1}}, ""},
		{"", nil, "no hosts"},
		{",,", nil, "no hosts"},
		{"a:0", nil, `slots "0"`},
		{"a:x", nil, `slots "x"`},
		{"a:-1", nil, `slots "-1"`},
		{":2", nil, "empty host name"},
		{"@a:2", nil, "empty user"},
		{"[::1:2", nil, "unterminated"},
		{"[::1]2", nil, "[ADDRESS]:SLOTS"},
		{"a/b:2", nil, "contains"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseHostList(tc.in)
			if tc.errWant != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errWant) || !strings.Contains(err.Error(), "-H") {
					t.Fatalf("error %v, want one with -H and %q", err, tc.errWant)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestParseHostfile(t *testing.T) {
	tests := []struct {
		name, text string
		want       []Host
		errWant    string
	}{
		{"open mpi", "# cluster\nnode1 slots=4\nnode2 slots=2 max_slots=8\n\n", []Host{{Name: "node1", Slots: 4}, {Name: "node2", Slots: 2}}, ""},
		{"horovod", "node1:4   # fast\n  node2:2\n", []Host{{Name: "node1", Slots: 4}, {Name: "node2", Slots: 2}}, ""},
		{"mixed and bare", "node1\nnode2 slots=3\nbob@node3:2\n", []Host{{Name: "node1", Slots: 1}, {Name: "node2", Slots: 3}, {Name: "node3", User: "bob", Slots: 2}}, ""},
		{"repeated host", "n slots=2\nn slots=2\n", []Host{{Name: "n", Slots: 4}}, ""},
		{"ipv6", "[::1] slots=2\n", []Host{{Name: "::1", Slots: 2}}, ""},
		{"empty", "# nothing\n\n", nil, "hosts.txt: no hosts"},
		{"bad slots", "n1 slots=4\nn2 slots=zero\n", nil, "hosts.txt:2: slots=zero"},
		{"unknown key", "n1 gpus=4\n", nil, `hosts.txt:1: unknown key "gpus"`},
		{"not key=value", "n1 4\n", nil, `hosts.txt:1: "4": want KEY=VALUE`},
		{"both syntaxes", "n1:2 slots=4\n", nil, "hosts.txt:1:"},
		{"bad max_slots", "n1 max_slots=-2\n", nil, "hosts.txt:1: max_slots=-2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseHostfile(strings.NewReader(tc.text), "hosts.txt")
			if tc.errWant != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errWant) {
					t.Fatalf("error %v, want %q", err, tc.errWant)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	if _, err := ReadHostfile(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "--hostfile") {
		t.Errorf("missing hostfile: %v", err)
	}
}

func TestPlace(t *testing.T) {
	two := []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 3}}
	tests := []struct {
		name    string
		hosts   []Host
		np      int
		over    bool
		want    string // host index and local rank/size per rank
		errWant string
	}{
		{"fill in order", two, 4, false, "a0/2 a1/2 b0/2 b1/2", ""},
		{"every slot", two, 0, false, "a0/2 a1/2 b0/3 b1/3 b2/3", ""},
		{"first host only", two, 2, false, "a0/2 a1/2", ""},
		{"one rank", two, 1, false, "a0/1", ""},
		{"too many", two, 6, false, "", "-np 6: more ranks than the 5 slots of 2 host(s) (a:2,b:3); add hosts or slots, or pass --oversubscribe"},
		{"oversubscribed", two, 7, true, "a0/4 a1/4 a2/4 a3/4 b0/3 b1/3 b2/3", ""},
		{"oversubscribed twice", []Host{{Name: "a", Slots: 1}, {Name: "b", Slots: 1}}, 5, true, "a0/3 a1/3 a2/3 b0/2 b1/2", ""},
		{"no hosts", nil, 1, false, "", "no hosts"},
		{"negative", two, -1, false, "", "-np -1"},
		{"oversubscribed beyond any host", two, 2*MaxSlots + 1, true, "", "-np 131073: more than 65536 ranks on each of the 2 host(s)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Place(tc.hosts, tc.np, tc.over)
			if tc.errWant != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errWant) {
					t.Fatalf("error %v, want %q", err, tc.errWant)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var parts []string
			for _, s := range got {
				parts = append(parts, tc.hosts[s.Host].Name+strconv.Itoa(s.LocalRank)+"/"+strconv.Itoa(s.LocalSize))
			}
			if g := strings.Join(parts, " "); g != tc.want {
				t.Errorf("got %s, want %s", g, tc.want)
			}
		})
	}
}

func TestJobPlacementEnvironment(t *testing.T) {
	// Local ranks with a placement: "localhost" ranks run here, without SSH, with the host's
	// local ranks and HETSYNC_HOSTNAME.
	hosts := []Host{{Name: "localhost", Slots: 3}}
	place, err := Place(hosts, 3, false)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := NewSSHSpawner(SSHConfig{}, hosts, place)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	var out syncBuffer
	job := &Job{NP: 3, Command: []string{"sh", "-c", `echo "$HETSYNC_LOCAL_RANK/$HETSYNC_LOCAL_SIZE $HETSYNC_HOSTNAME $HETSYNC_IFACE"`},
		Env: os.Environ(), Stdout: &out, Spawner: sp, Hosts: hosts, Placement: place, Iface: "lo"}
	if err := job.Run(testContext(t)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"[0] 0/3 localhost lo\n", "[1] 1/3 localhost lo\n", "[2] 2/3 localhost lo\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	bad := []struct {
		name string
		job  Job
		want string
	}{
		{"placement size", Job{NP: 2, Command: []string{"true"}, Hosts: hosts, Placement: place}, "placement of 3 rank(s) for -np 2"},
		{"hosts without placement", Job{NP: 1, Command: []string{"true"}, Hosts: hosts}, "no placement"},
		{"host index", Job{NP: 1, Command: []string{"true"}, Hosts: hosts, Placement: []Slot{{Host: 1, LocalSize: 1}}}, "rank 0 placed on host #1 of 1"},
		{"local rank", Job{NP: 1, Command: []string{"true"}, Hosts: hosts, Placement: []Slot{{LocalRank: 1, LocalSize: 1}}}, "local rank 1 of 1"},
		{"timeout", Job{NP: 1, Command: []string{"true"}, Timeout: -time.Second}, "--timeout -1s"},
	}
	for _, tc := range bad {
		if err := tc.job.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestJobTimeoutLocal(t *testing.T) {
	var log syncBuffer
	job := &Job{NP: 3, Command: []string{"sh", "-c", `[ "$HETSYNC_RANK" = 0 ] && exit 0; exec sleep 600`}, Env: os.Environ(),
		Timeout: 500 * time.Millisecond, Grace: 200 * time.Millisecond, Log: &log}
	// The timeout starts once every rank is started, and the last one starts only after rank 0
	// has exited, however long that takes on a loaded machine: the ranks named are exact.
	job.Spawner = &lastAfterRank0Exits{Spawner: LocalSpawner{}, last: job.NP - 1, exited: make(chan struct{})}
	err := job.Run(testContext(t))
	want := "job ran longer than --timeout 500ms; 2 rank(s) still running: 1, 2"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	if !strings.Contains(log.String(), want) {
		t.Errorf("launcher log lacks the timeout: %q", log.String())
	}
}

func TestTimestampWriter(t *testing.T) {
	var b bytes.Buffer
	lw := &lockedWriter{w: &timestampWriter{w: &b}}
	p := newPrefixWriter("[3] ", lw)
	_, _ = p.Write([]byte("one\ntw"))
	_, _ = p.Write([]byte("o\n"))
	p.Flush()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("lines %q", lines)
	}
	for i, want := range []string{"[3] one", "[3] two"} {
		ts, rest, ok := strings.Cut(lines[i], " ")
		if _, err := time.Parse("2006-01-02T15:04:05.000Z07:00", ts); err != nil || !ok || rest != want {
			t.Errorf("line %q: want TIMESTAMP %q (%v)", lines[i], want, err)
		}
	}
}
