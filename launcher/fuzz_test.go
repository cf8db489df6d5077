package launcher

import (
	"bytes"
	"strings"
	"testing"
	"unicode"
)

// hostSeeds are host lists and hostfiles from the parser's tests, good and bad.
var hostSeeds = []string{
	"host1:2,host2:2", " a:3 , b ", "a:1,b:2,a:2", "alice@node1:4", "[fe80::1]:2,[::1]", ",,", "a:0", "a:-1",
	"@a:2", "[::1:2", "[::1]2", "a/b:2",
	"# cluster\nnode1 slots=4\nnode2 slots=2 max_slots=8\n\n", "node1:4   # fast\n  node2:2\n",
	"node1\nnode2 slots=3\nbob@node3:2\n", "[::1] slots=2\n", "n1 gpus=4\n", "n1 4\n", "n1:2 slots=4\n",
	"n1 max_slots=-2\n", "a:9223372036854775807,a:1",
}

// checkHosts holds what every accepted host list must satisfy.
func checkHosts(t *testing.T, in string, hosts []Host) {
	t.Helper()
	if len(hosts) == 0 {
		t.Fatalf("%q: accepted with no hosts", in)
	}
	seen := map[string]bool{}
	for _, h := range hosts {
		bad := func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || strings.ContainsRune("/@,", r) }
		if h.Name == "" || strings.ContainsFunc(h.Name, bad) || strings.ContainsFunc(h.User, bad) || h.Slots < 1 || h.Slots > MaxSlots {
			t.Fatalf("%q: accepted a bad host %+v", in, h)
		}
		if seen[h.String()] {
			t.Fatalf("%q: host %s listed twice after merging", in, h)
		}
		seen[h.String()] = true
	}
}

// FuzzParseHostList: no -H value makes the parser panic, and what it accepts is a list of
// distinct, named hosts with at least one slot each.
func FuzzParseHostList(f *testing.F) {
	for _, s := range hostSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := ParseHostList(s)
		if err != nil {
			if !strings.Contains(err.Error(), "-H") {
				t.Fatalf("%q: error %v does not name -H", s, err)
			}
			return
		}
		checkHosts(t, s, hosts)
	})
}

// FuzzParseHostfile: the same for hostfiles (both syntaxes); errors name the file.
func FuzzParseHostfile(f *testing.F) {
	for _, s := range hostSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		hosts, err := ParseHostfile(bytes.NewReader(b), "hosts.txt")
		if err != nil {
			if !strings.Contains(err.Error(), "hosts.txt") {
				t.Fatalf("%q: error %v does not name the file", b, err)
			}
			return
		}
		checkHosts(t, string(b), hosts)
	})
}
