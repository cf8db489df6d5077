package p2p

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkNoProofFiles fails when a host-proof file of the job with tag is left in /dev/shm.
func checkNoProofFiles(t *testing.T, tag jobTag) {
	t.Helper()
	left, _ := filepath.Glob(filepath.Join("/dev/shm", proofPrefix+tag.String()+"-*"))
	if len(left) > 0 {
		t.Errorf("host-proof files left behind: %v", left)
	}
}

// proofPeer writes rank's proof file into dir and returns its table entry.
func proofPeer(t *testing.T, dir string, rank int, override string) peerInfo {
	t.Helper()
	pf, err := newProofFile(dir, newJobTag("proof"), rank)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pf.remove)
	if pf.proof.File == "" || pf.proof.NetNS == "" {
		t.Fatalf("rank %d: no proof written in %s: %+v", rank, dir, pf.proof)
	}
	return peerInfo{Rank: rank, HostOverride: override, Proof: pf.proof}
}

// TestHostProof: ranks share a host only when one reads the other's file with the published
// bytes, in the same network namespace, and no explicit host names part them.
func TestHostProof(t *testing.T) {
	here, there := t.TempDir(), t.TempDir()
	me := proofPeer(t, here, 0, "")
	local := proofPeer(t, here, 1, "")
	remote := proofPeer(t, there, 2, "")
	// A file of the same name on another host, holding other bytes.
	forged := proofPeer(t, there, 3, "")
	if err := os.WriteFile(filepath.Join(here, forged.Proof.File), []byte("other bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	otherNS := local
	otherNS.Proof.NetNS = "net:[1]"
	noProof := local
	noProof.Proof.File = ""
	escape := local
	escape.Proof.File = proofPrefix + "../../etc/passwd"
	named := func(p peerInfo, name string) peerInfo { p.HostOverride = name; return p }
	cases := []struct {
		name     string
		me, them peerInfo
		same     bool
		why      string
	}{
		{"itself", me, me, true, ""},
		{"same directory and namespace", me, local, true, ""},
		{"another directory", me, remote, false, "cannot read the host proof of rank 2"},
		{"same name, other bytes", me, forged, false, "other bytes"},
		{"another network namespace", me, otherNS, false, "not a network namespace"},
		{"no proof published", me, noProof, false, "published none"},
		{"a name that leaves the directory", me, escape, false, "malformed"},
		{"equal explicit names", named(me, "h"), named(local, "h"), true, ""},
		{"one explicit name", named(me, "h"), local, true, ""},
		{"different explicit names", named(me, "h1"), named(local, "h2"), false, "host names differ"},
		{"equal explicit names, no proof", named(me, "h"), named(remote, "h"), false, "cannot read"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := proveLocality(here, tc.me, tc.them)
			if got.same != tc.same || !strings.Contains(got.why, tc.why) {
				t.Errorf("proveLocality = %+v; want same %v, reason containing %q", got, tc.same, tc.why)
			}
		})
	}
}

// TestProofFileRemoved: remove deletes the file; a directory that cannot take one proves nothing
// and is no error.
func TestProofFileRemoved(t *testing.T) {
	dir := t.TempDir()
	pf, err := newProofFile(dir, newJobTag("removed"), 4)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, pf.proof.File)
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	pf.remove()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("%s still there after remove: %v", path, err)
	}
	none, err := newProofFile(filepath.Join(dir, "missing"), newJobTag("removed"), 4)
	if err != nil || none.proof.File != "" {
		t.Fatalf("proof in a missing directory: %+v, %v", none.proof, err)
	}
	none.remove()
}
