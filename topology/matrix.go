package topology

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
)

// Link is the cost of one direction of a rank pair: a message of b bytes takes
// Alpha + b·Beta seconds.
type Link struct {
	Alpha float64 `json:"alpha_s"`      // per-message latency, seconds
	Beta  float64 `json:"beta_s_per_b"` // time per byte, seconds
}

// Time is the modelled time of one message of b bytes on the link.
func (l Link) Time(b float64) float64 { return l.Alpha + b*l.Beta }

// Matrix is the network of a job of P ranks as every rank sees it: Host[r] is the index of
// the host rank r runs on (ranks share an index only when they proved they share a host), and
// Links[from][to] the cost of sending from one rank to another. Links[r][r] is unused.
type Matrix struct {
	P     int      `json:"p"`
	Host  []int    `json:"host"`
	Links [][]Link `json:"links"`
}

// Uniform is a matrix of p ranks, each on its own host, with every link costing (alpha, beta).
func Uniform(p int, alpha, beta float64) *Matrix {
	m := &Matrix{P: p, Host: make([]int, p), Links: make([][]Link, p)}
	for r := range p {
		m.Host[r] = r
		m.Links[r] = make([]Link, p)
		for q := range p {
			m.Links[r][q] = Link{Alpha: alpha, Beta: beta}
		}
	}
	return m
}

// Hosts returns the number of distinct hosts (Host values are 0..Hosts()-1 in a valid matrix).
func (m *Matrix) Hosts() int {
	n := 0
	for _, h := range m.Host {
		n = max(n, h+1)
	}
	return n
}

// RanksOf returns the ranks on each host, in rank order: RanksOf()[h] lists host h's ranks.
func (m *Matrix) RanksOf() [][]int {
	out := make([][]int, m.Hosts())
	for r, h := range m.Host {
		out[h] = append(out[h], r)
	}
	return out
}

// Validate checks the shape and values: P ranks, host indices 0..H-1 with none unused, and
// finite non-negative costs on every link between two different ranks.
func (m *Matrix) Validate() error {
	if m == nil {
		return fmt.Errorf("topology: nil matrix")
	}
	if m.P < 1 || len(m.Host) != m.P || len(m.Links) != m.P {
		return fmt.Errorf("topology: matrix of %d ranks has %d hosts entries and %d link rows", m.P, len(m.Host), len(m.Links))
	}
	used := make([]bool, m.P)
	for r, h := range m.Host {
		if h < 0 || h >= m.P {
			return fmt.Errorf("topology: rank %d on host %d, out of range [0, %d)", r, h, m.P)
		}
		used[h] = true
	}
	for h := range m.Hosts() {
		if !used[h] {
			return fmt.Errorf("topology: host index %d has no rank (host indices must be dense)", h)
		}
	}
	for r, row := range m.Links {
		if len(row) != m.P {
			return fmt.Errorf("topology: link row of rank %d has %d entries, want %d", r, len(row), m.P)
		}
		for q, l := range row {
			if q == r {
				continue
			}
			if !(l.Alpha >= 0 && l.Beta >= 0) || math.IsInf(l.Alpha, 0) || math.IsInf(l.Beta, 0) {
				return fmt.Errorf("topology: link from rank %d to rank %d has alpha %g, beta %g", r, q, l.Alpha, l.Beta)
			}
		}
	}
	return nil
}

// Marshal encodes the matrix as JSON (the form `hetsync bench --links --format json` prints and
// ranks broadcast so that all plan from the same bytes).
func (m *Matrix) Marshal() ([]byte, error) { return json.Marshal(m) }

// Unmarshal decodes and validates a matrix encoded by Marshal.
func Unmarshal(b []byte) (*Matrix, error) {
	var m Matrix
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("topology: decoding a link matrix: %w", err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Sub is m restricted to the ranks members, in that order (member i becomes rank i), with the
// hosts they use renumbered 0..H-1 in the order of m's host numbers; nil for a nil m. A
// sub-communicator plans from it.
func (m *Matrix) Sub(members []int) *Matrix {
	if m == nil {
		return nil
	}
	var hosts []int
	for _, r := range members {
		if !slices.Contains(hosts, m.Host[r]) {
			hosts = append(hosts, m.Host[r])
		}
	}
	slices.Sort(hosts)
	p := len(members)
	sub := &Matrix{P: p, Host: make([]int, p), Links: make([][]Link, p)}
	for i, r := range members {
		sub.Host[i] = slices.Index(hosts, m.Host[r])
		sub.Links[i] = make([]Link, p)
		for j, q := range members {
			sub.Links[i][j] = m.Links[r][q]
		}
	}
	return sub
}

// ReadFile reads and validates a matrix file written from Marshal (`hetsync bench --links
// --format json`, `scripts/netns-topo.sh links`). Its errors name the file.
func ReadFile(path string) (*Matrix, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m, err := Unmarshal(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}
