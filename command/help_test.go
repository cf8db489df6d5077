package command

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync/trainer"
)

// commandsWithFlags are the commands whose help lists flags.
var commandsWithFlags = []string{"launch", "bench", "train", "experiment", "report"}

// TestHelpFitsTheTerminal checks that no line of any command's help is wider than the width
// it is wrapped to: 80 columns without a terminal, $COLUMNS up to 100.
func TestHelpFitsTheTerminal(t *testing.T) {
	for _, tc := range []struct {
		columns string
		width   int
	}{{"", 80}, {"100", 100}, {"400", 100}} {
		t.Run("COLUMNS="+tc.columns, func(t *testing.T) {
			t.Setenv("COLUMNS", tc.columns)
			for _, args := range append([][]string{{"--help"}}, helpArgs()...) {
				code, out, stderr := runCLI(t, args...)
				if code != 0 || out == "" {
					t.Fatalf("%v: exit %d, stdout %q, stderr %s", args, code, out, stderr)
				}
				for i, line := range strings.Split(out, "\n") {
					if n := utf8.RuneCountInString(line); n > tc.width {
						t.Errorf("%v: line %d has %d columns (over %d): %q", args, i+1, n, tc.width, line)
					}
				}
			}
		})
	}
}

func helpArgs() [][]string {
	var out [][]string
	for _, c := range commandsWithFlags {
		out = append(out, []string{c, "--help"})
	}
	return out
}

// TestHelpGroupsEveryFlag checks that every visible flag of every command is in one of the
// help's categories and that the help shows it under that category's heading.
func TestHelpGroupsEveryFlag(t *testing.T) {
	t.Setenv("COLUMNS", "")
	app := newApp(io.Discard, io.Discard, Options{})
	for _, name := range commandsWithFlags {
		cmd := app.Command(name)
		_, out, _ := runCLI(t, name, "--help")
		under := map[string]string{} // a flag's names as the help shows them -> its heading
		heading := ""
		for _, line := range strings.Split(out, "\n") {
			switch {
			case strings.HasSuffix(line, ":") && !strings.HasPrefix(line, " "):
				heading = strings.TrimSuffix(line, ":")
			case strings.HasPrefix(line, "  -"):
				under[strings.Fields(line)[0]] = heading
			}
		}
		for _, f := range cmd.VisibleFlags() {
			cat := flagCategory(f)
			if !slices.Contains(categoryOrder, cat) {
				t.Errorf("%s --%s: category %q, want one of %q", name, f.Names()[0], cat, categoryOrder)
				continue
			}
			names, _ := flagHelp(f)
			if first := strings.Fields(names)[0]; under[first] != cat {
				t.Errorf("%s %s: listed under %q, want %q:\n%s", name, first, under[first], cat, out)
			}
		}
	}
}

// TestHelpStatesEachDefaultOnce checks that no flag's help states a default twice (its usage
// and cli's "(default: …)", which contradicted each other for --peer-timeout, --lr, --np).
func TestHelpStatesEachDefaultOnce(t *testing.T) {
	app := newApp(io.Discard, io.Discard, Options{})
	for _, name := range commandsWithFlags {
		for _, f := range app.Command(name).VisibleFlags() {
			_, text := flagHelp(f)
			if n := strings.Count(strings.ToLower(text), "default"); n > 1 {
				t.Errorf("%s --%s states a default %d times: %q", name, f.Names()[0], n, text)
			}
		}
	}
}

// TestTrainHelpDefaultsAreTheValuesUsed parses train's command line without the flags and
// checks that the default each one's help prints is the value train then uses.
func TestTrainHelpDefaultsAreTheValuesUsed(t *testing.T) {
	o := parseTrain(t, "--np", "2")
	first := func(s string) string { // "auto, or ps for ..." and "0.05; ..." print the value first
		s, _, _ = strings.Cut(s, ",")
		s, _, _ = strings.Cut(s, ";")
		s, _, _ = strings.Cut(s, " ")
		return s
	}
	used := map[string]string{
		"sync": o.Config.Strategy, "collective": o.Config.Collective, "model": o.Workload.Model,
		"batch": strconv.Itoa(o.Config.Batch), "lr": fmt.Sprint(o.Config.LR), "momentum": fmt.Sprint(o.Config.Momentum),
		"grad-reduction": o.Config.GradReduction, "shard": o.Workload.Shard, "seed": fmt.Sprint(o.Config.Seed),
		"epochs": fmt.Sprint(o.Config.Epochs), "eval-every": fmt.Sprint(o.Config.Eval.Rounds),
		"device": strings.Join(o.Workload.Devices, ","), "transport": o.Transport, "data-path": o.DataPath,
		"security": o.Security, "arena": o.Arena, "join-timeout": o.JoinTimeout.String(),
	}
	flags := map[string]cli.Flag{}
	for _, f := range trainCommand(Options{}).Flags {
		flags[f.Names()[0]] = f
	}
	for name, want := range used {
		if got := first(flagDefault(flags[name])); got != want {
			t.Errorf("train --%s: help says default %q (%q), train uses %q", name, got, flagDefault(flags[name]), want)
		}
	}
	// --lr's default for summed gradients, the second half of its help
	sum := parseTrain(t, "--np", "2", "--grad-reduction", "sum", "--batch", "50")
	if want := trainer.DefaultLR("sum", 50); sum.Config.LR != want || !strings.Contains(flagDefault(flags["lr"]), "/batch with --grad-reduction sum") {
		t.Errorf("--grad-reduction sum --batch 50: lr %v, want %v as the help says (%q)", sum.Config.LR, want, flagDefault(flags["lr"]))
	}
	// a strategy that runs only over the parameter server gets it, as the help says
	if ps := parseTrain(t, "--np", "2", "--sync", "asgd"); ps.Config.Collective != "ps" ||
		!strings.Contains(flagDefault(flags["collective"]), "or ps for a strategy that runs only over it") {
		t.Errorf("--sync asgd: collective %q, want ps as the help says (%q)", ps.Config.Collective, flagDefault(flags["collective"]))
	}
}

// parseTrain parses a train command line into its options without running anything.
func parseTrain(t *testing.T, args ...string) trainOptions {
	t.Helper()
	cmd := trainCommand(Options{})
	var o trainOptions
	var parseErr error
	cmd.Action = func(c *cli.Context) error {
		o, parseErr = trainOptionsFrom(c, rankJob{})
		return nil
	}
	app := &cli.App{Name: "hetsync", Writer: io.Discard, ErrWriter: io.Discard, Commands: []*cli.Command{cmd}}
	if err := app.Run(append([]string{"hetsync", "train"}, args...)); err != nil || parseErr != nil {
		t.Fatalf("train %v: %v %v", args, err, parseErr)
	}
	return o
}

// TestDurationWithoutUnit checks that a duration flag given a bare number says that it needs
// a unit, naming the flag, where the flag parser said only "parse error".
func TestDurationWithoutUnit(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "--peer-timeout", "8"}, "hetsync: --peer-timeout 8: a duration needs a unit, e.g. 8s"},
		{[]string{"launch", "--grace=3", "-np", "1", "true"}, "hetsync: --grace 3: a duration needs a unit, e.g. 3s"},
		{[]string{"bench", "--settle", "0.5"}, "hetsync: --settle 0.5: a duration needs a unit, e.g. 0.5s"},
		{[]string{"train", "--max-time", "ten"}, `hetsync: --max-time "ten": not a duration`},
	} {
		code, _, stderr := runCLI(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}

// TestNIsNP checks that -n is mpirun's alias of -np for launch and train (bench keeps
// nccl-tests' -n, the iteration count).
func TestNIsNP(t *testing.T) {
	if o := parseTrain(t, "-n", "3", "--transport", "mem"); o.NP != 3 {
		t.Errorf("train -n 3: NP %d", o.NP)
	}
	dir := t.TempDir()
	code, _, stderr := runCLI(t, "launch", "-n", "2", "--", "sh", "-c", `touch "$0/rank-$HETSYNC_RANK"`, dir)
	if code != 0 {
		t.Fatalf("launch -n 2: exit %d: %s", code, stderr)
	}
	for r := range 3 {
		_, err := os.Stat(filepath.Join(dir, fmt.Sprintf("rank-%d", r)))
		if ran := err == nil; ran != (r < 2) {
			t.Errorf("launch -n 2: rank %d ran: %v", r, ran)
		}
	}
	if code, _, stderr := runCLI(t, "bench", "--np", "2", "-n", "0"); code != 2 || !strings.Contains(stderr, "-n 0") {
		t.Errorf("bench -n 0: exit %d, %s; want -n as the iteration count", code, stderr)
	}
}

// TestReportDefaultOut checks that report without --out writes runs/report-TIME beside the
// runs, as its help says.
func TestReportDefaultOut(t *testing.T) {
	dir := t.TempDir()
	data := tinyDataDir(t, dir, 200, 50)
	run := filepath.Join(dir, "runs", "ssgd")
	trainConfigJSON(t, data, run, []string{"--sync", "ssgd"})
	t.Chdir(dir)
	code, out, stderr := runCLI(t, "report", run)
	if code != 0 {
		t.Fatalf("report without --out: exit %d: %s", code, stderr)
	}
	reports, _ := filepath.Glob(filepath.Join("runs", "report-*", "report.md"))
	if len(reports) != 1 || !strings.Contains(out, "wrote "+reports[0]) {
		t.Errorf("report without --out wrote %q; stdout:\n%s", reports, out)
	}
	if !strings.HasPrefix(reportDefaultOut, "runs/report-") {
		t.Errorf("report's help names %q as its default --out", reportDefaultOut)
	}
	var buf bytes.Buffer
	writeCommandHelp(&buf, reportCommand(), 80)
	if !strings.Contains(buf.String(), "(default: "+reportDefaultOut+")") {
		t.Errorf("report --help does not state its default --out:\n%s", buf.String())
	}
}
