package main

import (
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/collective/bench"
	"github.com/hetsync/hetsync/collective/topology"
)

// configsKeyword in --collective stands for auto and every configuration a link matrix makes
// available (algorithm × hierarchy × order), for comparing auto with every hand-picked one.
const configsKeyword = "configs"

// linksFlag is bench's --links-file.
func linksFileFlag() cli.Flag {
	return &cli.StringFlag{Name: "links-file", Usage: "link matrix (JSON: hosts and α/β of every rank pair, as scripts/netns-topo.sh links prints) that auto, ring order, ps placement and the hier- configurations plan from; every rank reads it, so it must be the same file on every host"}
}

// readLinks reads --links-file, nil when the flag is empty.
func readLinks(path string) (*topology.Matrix, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--links-file: %w", err)
	}
	m, err := topology.Unmarshal(b)
	if err != nil {
		return nil, fmt.Errorf("--links-file %s: %w", path, err)
	}
	return m, nil
}

// topoCollective reports whether name is a configuration that only a link matrix makes
// available ("hier-ring/grouped", "butterfly/interleaved"), and expands configsKeyword.
func topoCollectives(name string) ([]string, bool) {
	if name == configsKeyword {
		return append([]string{"auto"}, collective.Configurations()...), true
	}
	if slices.Contains(collective.Configurations(), name) {
		return []string{name}, true
	}
	return nil, false
}

// checkLinks checks --links-file against the collectives and the world size (p = 0: unknown
// yet).
func (o benchOptions) checkLinks(p int) error {
	if o.Links == nil {
		for _, name := range o.Collectives {
			if !slices.Contains(collective.Algorithms(), name) {
				return fmt.Errorf("--collective %s plans from the link matrix: give --links-file", name)
			}
		}
		return nil
	}
	if p != 0 && o.Links.P != p {
		return fmt.Errorf("--links-file %s is a matrix of %d ranks for a job of %d", o.LinksFile, o.Links.P, p)
	}
	return nil
}

// writePrediction writes, under a row of the text table, what the communicator runs for that
// size and the time the simulator predicted beside the time measured: a comment line, so the
// nccl-tests columns stay as they are.
func writePrediction(w io.Writer, format bench.Format, comm *collective.Comm, r bench.Row, dt collective.DType) error {
	if format != bench.Text || comm.Links() == nil {
		return nil
	}
	ch, err := comm.AllReduceChoice(r.Count, dt)
	if err != nil {
		return err
	}
	pred := float64(ch.Predicted.Microseconds())
	ratio := "-"
	if pred > 0 {
		ratio = fmt.Sprintf("%.2f", r.AvgUs/pred)
	}
	_, err = fmt.Fprintf(w, "#  %d B: runs %s, predicted %.2f us, measured/predicted %s\n", r.Bytes, ch.Algorithm, pred, ratio)
	return err
}
