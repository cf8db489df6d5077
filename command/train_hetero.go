package command

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync/launcher"
	"github.com/hetsync/hetsync/trainer"
	"github.com/hetsync/hetsync/workload"
)

// envHeteroTFast carries the measured fast step time from `hetsync train` to the ranks it
// launches, so that every rank uses the same t_fast (the ranks re-read the command line).
const envHeteroTFast = "HETSYNC_HETERO_TFAST"

// heteroFlags are the flags of heterogeneity injection that are not per-rank lists: WBSP's
// profiles, the slowdown base and transient stragglers (trainer.StragglerConfig). Every
// strategy gets them.
func heteroFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "hetero-profile", Usage: "WBSP heterogeneity h1, h2 or h3: odd ranks sleep 5, 10 or 15× t_fast per step (sets --step-sleep)"},
		&cli.DurationFlag{Name: "hetero-tfast", EnvVars: []string{envHeteroTFast}, DefaultText: "measured here: the median step time of --model at --batch", Usage: "t_fast of --hetero-profile and --slowdown-base tfast"},
		&cli.StringFlag{Name: "stragglers", Usage: "transient stragglers: `SPEC` is ranks=1,2;delay=30ms;at=20s,60s;for=10s (and ;mode=network or compute) or preset:s1, preset:s2"},
	}
}

// applyHeteroFlags reads --stragglers and, with --hetero-profile, fills cfg.StepSleep
// (measuring t_fast when --hetero-tfast is not given).
func applyHeteroFlags(c *cli.Context, cfg *trainer.Config) error {
	var err error
	if cfg.Stragglers, err = trainer.ParseStragglers(c.String("stragglers")); err != nil {
		return err
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
	model, batch := c.String("model"), cfg.Batch
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
	tFast, err := workload.MeasureStepTime(model, batch, cfg.Seed, threads, 20)
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
