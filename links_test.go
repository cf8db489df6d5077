package hetsync_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hetsync/hetsync"
	"github.com/hetsync/hetsync/topology"
)

// TestInitLinks: the Comm that Init returns plans from the matrix its links mode names (the
// option over HETSYNC_LINKS over the default), the same matrix on every rank, and its
// collectives run.
func TestInitLinks(t *testing.T) {
	dir := t.TempDir()
	fileOf := func(p int) string {
		path := filepath.Join(dir, fmt.Sprintf("links%d.json", p))
		b, err := topology.Uniform(p, 5e-6, 1e-9).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	tests := []struct {
		name      string
		env       string // HETSYNC_LINKS; "FILE" for the matrix file
		opt       string // WithLinks; "" none, "FILE" the matrix file
		oneHost   bool   // the launcher's local size is the world size (else 1: a host per rank)
		want      string // "off", "measure" or "file"
		rankCount []int
	}{
		{"default on one host", "", "", true, "off", []int{1, 3}},
		{"default on a host per rank", "", "", false, "measure", []int{2, 3}},
		{"measure from the environment", "measure", "", true, "measure", []int{2, 4}},
		{"file from the environment", "FILE", "", false, "file", []int{3}},
		{"option over the environment", "measure", "off", false, "off", []int{2}},
		{"file option", "off", "FILE", true, "file", []int{2, 5}},
	}
	for _, tc := range tests {
		for _, p := range tc.rankCount {
			t.Run(fmt.Sprintf("%s/p%d", tc.name, p), func(t *testing.T) {
				port, file := freePort(t), fileOf(p)
				subst := func(s string) string {
					if s == "FILE" {
						return file
					}
					return s
				}
				env := func(r int) map[string]string {
					m := launchers[0].env(r, p, port)
					m["HETSYNC_SECURITY"], m["HETSYNC_DATA_PATH"] = "none", "tcp"
					if !tc.oneHost {
						m["HETSYNC_LOCAL_RANK"], m["HETSYNC_LOCAL_SIZE"] = "0", "1"
					}
					if tc.env != "" {
						m["HETSYNC_LINKS"] = subst(tc.env)
					}
					return m
				}
				var opts []hetsync.Option
				if tc.opt != "" {
					opts = append(opts, hetsync.WithLinks(subst(tc.opt)))
				}
				got := make([][]byte, p)
				initJob(t, p, env, func(ctx context.Context, c *hetsync.Comm) error {
					if m := c.Links(); m != nil {
						b, err := m.Marshal()
						if err != nil {
							return err
						}
						got[c.Rank()] = b
					}
					return sumCheck(ctx, c, 11)
				}, opts...)
				want, _ := os.ReadFile(file)
				for r, b := range got {
					switch {
					case tc.want == "off" && b != nil:
						t.Errorf("rank %d: links %s, want none", r, b)
					case tc.want != "off" && b == nil:
						t.Errorf("rank %d: no links, want %s", r, tc.want)
					case tc.want == "file" && !bytes.Equal(b, want):
						t.Errorf("rank %d: links %s, want the file's %s", r, b, want)
					case tc.want == "measure" && !bytes.Equal(b, got[0]):
						t.Errorf("rank %d: measured %s, rank 0 %s", r, b, got[0])
					}
				}
				if tc.want == "measure" {
					m, err := topology.Unmarshal(got[0])
					if err != nil || m.P != p || m.Hosts() != 1 {
						t.Errorf("measured matrix %s (%v): want %d ranks on the one host they share", got[0], err, p)
					}
				}
			})
		}
	}
}

// TestInitLinksErrors: a links mode that names no readable matrix of the job's size fails
// Init, naming the rank, where the mode came from and the file.
func TestInitLinksErrors(t *testing.T) {
	dir := t.TempDir()
	three := filepath.Join(dir, "three.json")
	b, err := topology.Uniform(3, 1e-6, 1e-9).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.json")
	for path, data := range map[string][]byte{three: b, bad: []byte(`{"p": 1, "links": "x"}`)} {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	missing := filepath.Join(dir, "missing.json")
	tests := []struct {
		name string
		env  string
		opt  string
		want []string
	}{
		{"missing file", missing, "", []string{"rank 0", "HETSYNC_LINKS", missing, "measure"}},
		{"typo of a mode", "", "mesure", []string{"rank 0", `WithLinks("mesure")`, "off, measure or a matrix file"}},
		{"matrix of another size", three, "", []string{"rank 0", three, "3 ranks for a job of 1"}},
		{"not a matrix", "", bad, []string{"rank 0", bad}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := launchers[0].env(0, 1, freePort(t))
			env["HETSYNC_SECURITY"], env["HETSYNC_DATA_PATH"], env["HETSYNC_LINKS"] = "none", "tcp", tc.env
			opts := []hetsync.Option{envOf(env)}
			if tc.opt != "" {
				opts = append(opts, hetsync.WithLinks(tc.opt))
			}
			initFails(t, opts, tc.want)
		})
	}
}

// TestInitConfigurationFromLinks: a configuration that plans from the link matrix
// (WithAlgorithm("hier-ring")) forms through Init's options once the job has its matrix, which
// it only has after joining: its name is checked before the join and the algorithm built once
// the matrix is there. Without a matrix Init refuses it, naming the option.
func TestInitConfigurationFromLinks(t *testing.T) {
	const p = 3
	dir := t.TempDir()
	file := filepath.Join(dir, "links.json")
	b, err := topology.Uniform(p, 5e-6, 1e-9).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	env := func(r int) map[string]string {
		m := launchers[0].env(r, p, port)
		m["HETSYNC_SECURITY"], m["HETSYNC_DATA_PATH"] = "none", "tcp"
		return m
	}
	initJob(t, p, env, func(ctx context.Context, c *hetsync.Comm) error {
		if got := c.Algorithm(); got != "hier-ring" {
			return fmt.Errorf("rank %d runs %q, want hier-ring", c.Rank(), got)
		}
		return sumCheck(ctx, c, 11)
	}, hetsync.WithAlgorithm("hier-ring"), hetsync.WithLinks(file))

	single := launchers[0].env(0, 1, freePort(t))
	single["HETSYNC_SECURITY"], single["HETSYNC_DATA_PATH"] = "none", "tcp"
	initFails(t, []hetsync.Option{envOf(single), hetsync.WithAlgorithm("hier-ring"), hetsync.WithLinks(hetsync.LinksOff)},
		[]string{"rank 0", `WithAlgorithm("hier-ring")`, "link matrix"})
}
