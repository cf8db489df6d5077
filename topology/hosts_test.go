package topology

import (
	"slices"
	"strings"
	"testing"
)

// TestHostLevel: a matrix whose host pairs are uniform reads back whole from its host-level
// form; one whose rank pairs differ is marked and keeps each host pair's fastest link.
func TestHostLevel(t *testing.T) {
	m := Uniform(5, 1e-5, 1e-9)
	copy(m.Host, []int{0, 0, 1, 2, 2})
	for r := range 5 {
		for q := range 5 {
			if m.Host[r] == m.Host[q] {
				m.Links[r][q] = Link{Alpha: 1e-6, Beta: 1e-10}
			}
		}
	}
	hm := m.HostLevel()
	if err := hm.Validate(); err != nil {
		t.Fatal(err)
	}
	if !hm.Uniform || hm.Hosts() != 3 || hm.Local[0] != (Link{Alpha: 1e-6, Beta: 1e-10}) || hm.Links[0][2] != (Link{Alpha: 1e-5, Beta: 1e-9}) {
		t.Fatalf("host level of a uniform matrix: %+v", hm)
	}
	back := hm.Matrix()
	for r := range 5 {
		for q := range 5 {
			if r != q && back.Links[r][q] != m.Links[r][q] {
				t.Errorf("link %d→%d: %+v back, %+v before", r, q, back.Links[r][q], m.Links[r][q])
			}
		}
	}
	m.Links[1][3] = Link{Alpha: 2e-5, Beta: 5e-10} // one rank pair of hosts 0 and 2 is faster
	hm = m.HostLevel()
	if hm.Uniform || hm.Links[0][2] != (Link{Alpha: 2e-5, Beta: 5e-10}) {
		t.Errorf("host level of an irregular matrix: uniform %v, link 0→2 %+v", hm.Uniform, hm.Links[0][2])
	}
}

// TestTiers: hosts are dealt into groups in order, the remainder to the first groups, and the
// description refuses what cannot be a network, naming what is wrong.
func TestTiers(t *testing.T) {
	tr := Tiers{Hosts: 7, RanksPerHost: 2, Groups: 3, Local: Link{Beta: 1}, Access: Link{Beta: 2}, Uplink: Link{Beta: 3}}
	var groups []int
	for h := range tr.Hosts {
		groups = append(groups, tr.GroupOf(h))
	}
	if want := []int{0, 0, 0, 1, 1, 2, 2}; !slices.Equal(groups, want) {
		t.Errorf("groups %v, want %v", groups, want)
	}
	hm, err := tr.HostMatrix()
	if err != nil {
		t.Fatal(err)
	}
	if hm.P != 14 || hm.Host[13] != 6 || hm.Links[0][2].Beta != 2 || hm.Links[0][3].Beta != 3 || hm.Local[4].Beta != 1 {
		t.Errorf("host matrix %+v", hm)
	}
	for _, tc := range []struct {
		t    Tiers
		want string
	}{
		{Tiers{Hosts: 2, RanksPerHost: 1, Groups: 3}, "no more groups than hosts"},
		{Tiers{Hosts: 0, RanksPerHost: 1, Groups: 1}, "0 hosts"},
		{Tiers{Hosts: 2, RanksPerHost: 1, Groups: 1, Uplink: Link{Beta: -1}}, "uplink link"},
	} {
		if _, err := tc.t.HostMatrix(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want one saying %q", tc.t, err, tc.want)
		}
	}
}
