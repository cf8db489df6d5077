package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync/launcher"
	"github.com/hetsync/hetsync/trainer"
)

// envHeteroTFast carries the measured fast step time from `hetsync train` to the ranks it
// launches, so that every rank uses the same t_fast (the ranks re-read the command line).
const envHeteroTFast = "HETSYNC_HETERO_TFAST"

// psFlags are the flags of the parameter-server strategies (trainer.PSSyncConfig) and of
// WBSP's heterogeneity profiles.
func psFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "wbsp-apply", Value: "buffered", Usage: "wbsp, wbsp-opt: buffered (the paper: publish ΣΔ/N on the slowest worker's upload) or immediate (the code: apply each Δ/N at once)"},
		&cli.IntFlag{Name: "wbsp-slow-rank", Value: -1, Usage: "wbsp, wbsp-opt: the rank whose upload triggers the global update (-1: detect the slowest from upload intervals)"},
		&cli.StringFlag{Name: "dcasgd-variant", Value: "paper", Usage: "dcasgd: paper (per-worker backups) or mxnet (one shared previous weight, ESync's baseline)"},
		&cli.Float64Flag{Name: "dcasgd-lambda", Value: trainer.DefaultDCASGDLambda, Usage: "dcasgd: λ of the delay compensation"},
		&cli.IntFlag{Name: "staleness", Value: trainer.DefaultStaleness, Usage: "ssp: staleness bound s (0 is BSP)"},
		&cli.StringFlag{Name: "ssp-pull", Value: "every", Usage: "ssp: every (pull each step, block while more than s ahead) or lazy (the ADSP code: pull only when ≥ s ahead)"},
		&cli.StringFlag{Name: "ps-ranks", Usage: "asgd, dcasgd, ssp, wbsp, wbsp-opt: the ranks hosting parameter-server shards, comma-separated, e.g. 3 or 1,3 (default: ranks 0..--ps-servers-1)"},
		&cli.StringFlag{Name: "hetero-profile", Usage: "WBSP heterogeneity h1, h2 or h3: odd ranks sleep 5, 10 or 15× t_fast per step (sets --step-sleep)"},
		&cli.DurationFlag{Name: "hetero-tfast", EnvVars: []string{envHeteroTFast}, Usage: "t_fast of --hetero-profile (default: measured once on this machine: the median forward/backward time of --model at --batch)"},
	}
}

// applyPSFlags copies the parameter-server flags into cfg and, with --hetero-profile, fills
// cfg.StepSleep (measuring t_fast when --hetero-tfast is not given).
func applyPSFlags(c *cli.Context, cfg *trainer.Config) error {
	p := &cfg.PSSync
	p.WBSPApply = c.String("wbsp-apply")
	if r := c.Int("wbsp-slow-rank"); r >= 0 {
		p.WBSPSlowRank = &r
	}
	p.DCASGDVariant = c.String("dcasgd-variant")
	p.DCASGDLambda = c.Float64("dcasgd-lambda")
	if p.DCASGDLambda == 0 {
		return fmt.Errorf("--dcasgd-lambda 0: use --sync asgd for no delay compensation")
	}
	s := c.Int("staleness")
	p.Staleness = &s
	p.SSPPull = c.String("ssp-pull")
	if v := c.String("ps-ranks"); v != "" {
		for _, f := range strings.Split(v, ",") {
			r, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return fmt.Errorf("--ps-ranks %q: %q is not a rank number", v, f)
			}
			p.PSRanks = append(p.PSRanks, r)
		}
	}

	profile := c.String("hetero-profile")
	if profile == "" {
		return nil
	}
	if len(cfg.StepSleep) > 0 {
		return fmt.Errorf("--hetero-profile %s sets the per-step sleeps: do not give --step-sleep too", profile)
	}
	size, err := worldSize(c, "--hetero-profile")
	if err != nil {
		return err
	}
	tFast, err := heteroTFast(c, cfg, size, "--hetero-profile "+profile)
	if err != nil {
		return err
	}
	cfg.StepSleep, err = trainer.HeteroProfileSleep(profile, size, tFast)
	return err
}

// heteroTFast is --hetero-tfast, or, when it is not given, t_fast measured once on this
// machine (the median forward/backward time of --model at --batch on a rank's share of the
// cores) and exported to the ranks this process launches, so that all use the same value.
// who names the flag that needs it, for the message and errors.
func heteroTFast(c *cli.Context, cfg *trainer.Config, size int, who string) (time.Duration, error) {
	if t := c.Duration("hetero-tfast"); t > 0 {
		return t, nil
	}
	if t, err := time.ParseDuration(os.Getenv(envHeteroTFast)); err == nil && t > 0 {
		return t, nil // measured earlier in this process (for another flag)
	}
	model, batch := cfg.Model, cfg.Batch
	if model == "" {
		model = "mlp"
	}
	if batch <= 0 {
		batch = 64
	}
	threads := c.Int("threads")
	if threads <= 0 {
		threads = max(1, runtime.NumCPU()/size)
	}
	tFast, err := trainer.MeasureStepTime(model, batch, cfg.Seed, threads, 20)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", who, err)
	}
	// The ranks this process launches inherit the environment: they use this t_fast.
	if err := os.Setenv(envHeteroTFast, tFast.String()); err != nil {
		return 0, fmt.Errorf("%s: passing t_fast to the ranks: %w", who, err)
	}
	fmt.Fprintf(c.App.ErrWriter, "%s: measured t_fast = %v (%s, batch %d, %d threads)\n", who, tFast, model, batch, threads)
	return tFast, nil
}

// worldSize is --np, or the launcher's world size for a rank; what names the flag that needs it.
func worldSize(c *cli.Context, what string) (int, error) {
	if size := c.Int("np"); size > 0 {
		return size, nil
	}
	env, under, err := launcher.RankEnvFromEnviron(os.Getenv)
	if err != nil || !under {
		return 0, fmt.Errorf("%s needs --np (or a launcher's world size)", what)
	}
	return env.Size, nil
}

// applySlowdownBase reads --slowdown-base: step (scale each step's compute), tfast (t_fast,
// as --hetero-profile measures or --hetero-tfast gives it) or a duration.
func applySlowdownBase(c *cli.Context, cfg *trainer.Config) error {
	v := strings.TrimSpace(c.String("slowdown-base"))
	switch v {
	case "", "step":
		return nil
	case "tfast":
		// like a duration base, t_fast applies to every rank, --slowdown or not (factor 1)
		size, err := worldSize(c, "--slowdown-base tfast")
		if err != nil {
			return err
		}
		cfg.SlowdownBase, err = heteroTFast(c, cfg, size, "--slowdown-base tfast")
		return err
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return fmt.Errorf("--slowdown-base %q is neither step, tfast nor a positive duration (3ms)", v)
	}
	cfg.SlowdownBase = d
	return nil
}
