package hetsync

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/hetsync/hetsync/launcher"
	"github.com/hetsync/hetsync/topology"
	"github.com/hetsync/hetsync/transport"
)

// The modes of WithLinks and HETSYNC_LINKS; any other value is the path of a matrix file.
const (
	// LinksOff plans without a link matrix: every link costs the same to auto.
	LinksOff = "off"
	// LinksMeasure measures every host pair's latency and bandwidth when the job forms
	// (topology.Measure), so that auto, ring order, parameter-server placement and the hier-
	// configurations plan from the links the job has.
	LinksMeasure = "measure"
)

// WithLinks says where the job's link matrix comes from: LinksOff, LinksMeasure, or the path
// of a matrix file (JSON, as `hetsync bench --links --format json` prints it) that every rank
// reads, so it must be the same file on every host. Comm.Links returns the matrix.
//
// Default: HETSYNC_LINKS, else measure when the launcher put the ranks on more than one host
// and off when it put them all on one. Across hosts the links differ by orders of magnitude
// and measuring costs a fraction of a second; on one host every pair talks through the same
// memory, so there is nothing for a plan to tell apart and the measurement would only delay
// the start. The launcher's host count is the same on every rank, so every rank makes the
// same choice without a message.
//
// Only the jobs a launcher started plan from links: InitLocal's ranks, and a process that no
// launcher started, run in one process, with no links between hosts to plan from; there the
// option has no effect (give InitLocal a matrix with WithCollectiveOptions).
func WithLinks(mode string) Option {
	return func(c *config) { c.links = setting[string]{mode, fmt.Sprintf("WithLinks(%q)", mode)} }
}

// linksMode is the explicit mode, else HETSYNC_LINKS, else the default for a job of size
// ranks of which localSize share this rank's host; from names where it came from.
func (c *config) linksMode(env string, size, localSize int) (mode, from string) {
	mode, from = c.links.pick(strings.TrimSpace(env), launcher.EnvLinks)
	if mode != "" {
		return mode, from
	}
	if localSize < size {
		return LinksMeasure, "the default (more than one host)"
	}
	return LinksOff, "the default (one host)"
}

// planLinks is the matrix this rank plans from, nil for off. Measuring is a collective step:
// every rank of the job measures or none does, which the launcher's shared settings ensure;
// it ends with the join timeout, so that a rank launched with another mode makes the others
// fail instead of wait forever.
func (c *config) planLinks(ctx context.Context, ep transport.Endpoint, env launcher.RankEnv, timeout time.Duration) (*topology.Matrix, error) {
	mode, from := c.linksMode(env.Settings.Links, env.Size, env.LocalSize)
	switch mode {
	case LinksOff:
		return nil, nil
	case LinksMeasure:
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		// Measure's default probes grow until each outlasts a round trip, so that a shaped
		// link is read rather than a traffic shaper's burst: what the planner's rack grouping
		// needs (docs/results/topology-measured.md).
		m, err := topology.Measure(ctx, ep, topology.MeasureOptions{})
		if err != nil {
			return nil, fmt.Errorf("rank %d: measuring the links (%s from %s): %w", env.Rank, mode, from, err)
		}
		return m, nil
	}
	m, err := readLinksFile(mode, env.Size)
	if err != nil {
		return nil, fmt.Errorf("rank %d: links from %s: %w", env.Rank, from, err)
	}
	return m, nil
}

// readLinksFile reads a matrix file for a job of size ranks.
func readLinksFile(path string, size int) (*topology.Matrix, error) {
	m, err := topology.ReadFile(path)
	if err != nil {
		if pe := new(fs.PathError); errors.As(err, &pe) { // the file could not be read
			return nil, fmt.Errorf("matrix file: %w (want %s, %s or a matrix file)", err, LinksOff, LinksMeasure)
		}
		return nil, fmt.Errorf("matrix file %w", err)
	}
	if m.P != size {
		return nil, fmt.Errorf("matrix file %s: a matrix of %d ranks for a job of %d", path, m.P, size)
	}
	return m, nil
}
