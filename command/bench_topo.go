package command

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync"
	"github.com/hetsync/hetsync/bench"
	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/topology"
)

// configsKeyword in --collective stands for auto and every configuration a link matrix makes
// available (algorithm × hierarchy × order), for comparing auto with every hand-picked one.
const configsKeyword = "configs"

// planLinksFlag is --plan-links of bench, train and launch (exported to the ranks as
// HETSYNC_LINKS, read by hetsync.Init).
func planLinksFlag() cli.Flag {
	return &cli.StringFlag{Name: "plan-links", DefaultText: "measure on more than one host, else off",
		Usage: "the link matrix that auto, ring order and ps placement plan from: off, measure, or a matrix FILE (bench --links --format json)"}
}

// linksFile is --plan-links when it names a matrix file, else "".
func (n netOptions) linksFile() string {
	switch n.PlanLinks {
	case "", hetsync.LinksOff, hetsync.LinksMeasure:
		return ""
	}
	return n.PlanLinks
}

// mayMeasure reports whether the job may measure its links when it forms: the matrix, if
// any, is known only then.
func (n netOptions) mayMeasure() bool {
	return n.PlanLinks == hetsync.LinksMeasure || (n.PlanLinks == "" && n.Transport == "p2p")
}

func (n netOptions) checkPlanLinks() error {
	if n.Transport == "mem" && n.PlanLinks == hetsync.LinksMeasure {
		return errors.New("--plan-links measure: --transport mem runs every rank in this process, with no links to measure")
	}
	return nil
}

// readLinks reads the matrix file --plan-links names, nil for a mode.
func readLinks(path string) (*topology.Matrix, error) {
	if path == "" {
		return nil, nil
	}
	m, err := topology.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--plan-links: %w", err)
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

// checkLinks checks the matrix file against the collectives and the world size (p = 0:
// unknown yet). Where the job may measure, configurations wait for requireLinks.
func (o benchOptions) checkLinks(p int) error {
	if o.Links == nil {
		if o.mayMeasure() {
			return nil
		}
		return o.requireLinks("")
	}
	if p != 0 && o.Links.P != p {
		return fmt.Errorf("--plan-links %s is a matrix of %d ranks for a job of %d", o.linksFile(), o.Links.P, p)
	}
	return nil
}

// requireLinks fails when a collective plans from a link matrix and there is none; why says
// why the job has none.
func (o benchOptions) requireLinks(why string) error {
	if o.Links != nil {
		return nil
	}
	for _, name := range o.Collectives {
		if !slices.Contains(collective.Algorithms(), name) {
			return fmt.Errorf("--collective %s plans from the link matrix: give --plan-links measure or a matrix file%s", name, why)
		}
	}
	return nil
}

// withJobLinks is o with the matrix the job formed with (measured, read, or none) and
// --plan-links saying which, for the tables' notes.
func (o benchOptions) withJobLinks(m *topology.Matrix) (benchOptions, error) {
	o.Links = m
	if o.PlanLinks == "" {
		o.PlanLinks = hetsync.LinksOff
		if m != nil {
			o.PlanLinks = hetsync.LinksMeasure
		}
	}
	return o, o.requireLinks(" (the job measured none: its ranks are on one host)")
}

// replanFlag is bench's --replan.
func replanFlag() cli.Flag {
	return &cli.StringFlag{Name: "replan", DefaultText: "$" + collective.EnvReplan + ", else " + collective.ReplanOptions{}.String(),
		Usage: "how auto follows links that change under the job: off, on, or threshold=X,calls=N,every=N"}
}

// replanFrom reads --replan, else HETSYNC_REPLAN.
func replanFrom(c *cli.Context) (collective.ReplanOptions, error) {
	v, from := c.String("replan"), "--replan"
	if !c.IsSet("replan") {
		v, from = os.Getenv(collective.EnvReplan), collective.EnvReplan
	}
	o, err := collective.ParseReplanOptions(strings.TrimSpace(v))
	if err != nil {
		return o, fmt.Errorf("%s: %w", from, err)
	}
	return o, nil
}

// writePrediction writes, under a row of the text table, what the communicator runs for that
// size and the time the simulator predicted beside the time measured, and every re-plan since
// the last row (*seen counts those written): comment lines, so the nccl-tests columns stay as
// they are.
func writePrediction(w io.Writer, format bench.Format, comm *collective.Comm, r bench.Row, dt collective.DType, seen *int) error {
	if format != bench.Text || comm.Links() == nil {
		return nil
	}
	replans := comm.Replans()
	for _, rp := range replans[min(*seen, len(replans)):] {
		if _, err := fmt.Fprintf(w, "#  re-planned after call #%d: %d calls off plan in a row, links measured in %.0f ms, %s -> %s\n",
			rp.Seq, rp.Streak, float64(rp.Measure.Microseconds())/1e3, rp.From, rp.To); err != nil {
			return err
		}
	}
	*seen = len(replans)
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
