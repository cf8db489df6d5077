package topology

import (
	"fmt"
	"math"
)

// HostMatrix is a network described host by host: what a planner needs at thousands of
// ranks, where a Matrix of P×P links no longer fits (8,192 ranks: 64 Mi links, 1 GiB). Host[r]
// is rank r's host as in Matrix; Local[h] is the cost of a message between two ranks of host
// h; Links[h][g] the cost from any rank of host h to any rank of host g (Links[h][h] unused).
// Its size is P + H², H the number of hosts.
type HostMatrix struct {
	P     int      `json:"p"`
	Host  []int    `json:"host"`
	Local []Link   `json:"local"`
	Links [][]Link `json:"links"`
	// Uniform: every rank pair of a host pair costs the same in the matrix this was read from
	// (or the network was described host by host). When false, Links holds each host pair's
	// fastest rank pair, and a planner that needs every pair must read the full matrix.
	Uniform bool `json:"uniform"`
}

// HostLevel reduces m to its host-level description: every link of a host pair read as
// the pair's fastest (lowest β, then lowest α), and Uniform set when all of a host pair's
// rank pairs were equal. O(P²) time, O(P + H²) memory.
func (m *Matrix) HostLevel() *HostMatrix {
	nh := m.Hosts()
	hm := &HostMatrix{P: m.P, Host: append([]int(nil), m.Host...), Local: make([]Link, nh), Links: make([][]Link, nh), Uniform: true}
	seen := make([]bool, nh*nh)
	for h := range hm.Links {
		hm.Links[h] = make([]Link, nh)
	}
	for r, row := range m.Links {
		h := m.Host[r]
		for q, l := range row {
			if q == r {
				continue
			}
			g := m.Host[q]
			dst := &hm.Links[h][g]
			if h == g {
				dst = &hm.Local[h]
			}
			if !seen[h*nh+g] {
				seen[h*nh+g] = true
				*dst = l
				continue
			}
			if l != *dst {
				hm.Uniform = false
				if l.Beta < dst.Beta || (l.Beta == dst.Beta && l.Alpha < dst.Alpha) {
					*dst = l
				}
			}
		}
	}
	return hm
}

// Hosts is the number of hosts.
func (hm *HostMatrix) Hosts() int { return len(hm.Links) }

// Link is the cost of a message from rank r to rank q.
func (hm *HostMatrix) Link(r, q int) Link {
	h, g := hm.Host[r], hm.Host[q]
	if h == g {
		return hm.Local[h]
	}
	return hm.Links[h][g]
}

// Matrix expands the description to a full Matrix (P² links): for the replay of small jobs.
func (hm *HostMatrix) Matrix() *Matrix {
	m := &Matrix{P: hm.P, Host: append([]int(nil), hm.Host...), Links: make([][]Link, hm.P)}
	for r := range hm.P {
		m.Links[r] = make([]Link, hm.P)
		for q := range hm.P {
			if q != r {
				m.Links[r][q] = hm.Link(r, q)
			}
		}
	}
	return m
}

// Validate checks the shape and values as Matrix.Validate does.
func (hm *HostMatrix) Validate() error {
	if hm == nil {
		return fmt.Errorf("topology: nil host matrix")
	}
	nh := len(hm.Links)
	if hm.P < 1 || len(hm.Host) != hm.P || len(hm.Local) != nh {
		return fmt.Errorf("topology: host matrix of %d ranks has %d host entries, %d local links and %d link rows", hm.P, len(hm.Host), len(hm.Local), nh)
	}
	used := make([]bool, nh)
	for r, h := range hm.Host {
		if h < 0 || h >= nh {
			return fmt.Errorf("topology: rank %d on host %d, out of range [0, %d)", r, h, nh)
		}
		used[h] = true
	}
	for h, u := range used {
		if !u {
			return fmt.Errorf("topology: host index %d has no rank (host indices must be dense)", h)
		}
	}
	bad := func(l Link) bool {
		return !(l.Alpha >= 0 && l.Beta >= 0) || math.IsInf(l.Alpha, 0) || math.IsInf(l.Beta, 0)
	}
	for h, row := range hm.Links {
		if len(row) != nh {
			return fmt.Errorf("topology: link row of host %d has %d entries, want %d", h, len(row), nh)
		}
		if bad(hm.Local[h]) {
			return fmt.Errorf("topology: local link of host %d has alpha %g, beta %g", h, hm.Local[h].Alpha, hm.Local[h].Beta)
		}
		for g, l := range row {
			if g != h && bad(l) {
				return fmt.Errorf("topology: link from host %d to host %d has alpha %g, beta %g", h, g, l.Alpha, l.Beta)
			}
		}
	}
	return nil
}

// Tiers describes a two-tier network: Hosts hosts of RanksPerHost ranks each, dealt in
// order into Groups equal groups (racks: the first Hosts/Groups hosts in group 0, and so on,
// the remainder spread over the first groups); ranks numbered host by host. Local is the link
// between two ranks of a host, Access between hosts of one group, Uplink between groups.
type Tiers struct {
	Hosts, RanksPerHost, Groups int
	Local, Access, Uplink       Link
}

// Validate checks the counts and links.
func (t Tiers) Validate() error {
	if t.Hosts < 1 || t.RanksPerHost < 1 || t.Groups < 1 || t.Groups > t.Hosts {
		return fmt.Errorf("topology: %d hosts of %d ranks in %d groups: want at least one of each and no more groups than hosts", t.Hosts, t.RanksPerHost, t.Groups)
	}
	for _, l := range []struct {
		name string
		Link
	}{{"local", t.Local}, {"access", t.Access}, {"uplink", t.Uplink}} {
		if !(l.Alpha >= 0 && l.Beta >= 0) || math.IsInf(l.Alpha, 0) || math.IsInf(l.Beta, 0) {
			return fmt.Errorf("topology: %s link has alpha %g, beta %g", l.name, l.Alpha, l.Beta)
		}
	}
	return nil
}

// GroupOf is host h's group.
func (t Tiers) GroupOf(h int) int {
	per, extra := t.Hosts/t.Groups, t.Hosts%t.Groups
	// The first extra groups have per+1 hosts.
	if h < extra*(per+1) {
		return h / (per + 1)
	}
	return extra + (h-extra*(per+1))/per
}

// HostMatrix is the network's host-level description.
func (t Tiers) HostMatrix() (*HostMatrix, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	p := t.Hosts * t.RanksPerHost
	hm := &HostMatrix{P: p, Host: make([]int, p), Local: make([]Link, t.Hosts), Links: make([][]Link, t.Hosts), Uniform: true}
	for r := range p {
		hm.Host[r] = r / t.RanksPerHost
	}
	for h := range t.Hosts {
		hm.Local[h] = t.Local
		hm.Links[h] = make([]Link, t.Hosts)
		for g := range t.Hosts {
			switch {
			case g == h:
			case t.GroupOf(g) == t.GroupOf(h):
				hm.Links[h][g] = t.Access
			default:
				hm.Links[h][g] = t.Uplink
			}
		}
	}
	return hm, nil
}
