package main

import (
	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync/trainer"
)

// syncSwitchFlags are the flags of --sync sync-switch (trainer.SyncSwitchConfig) and of the
// transient stragglers (trainer.StragglerConfig, any strategy).
func syncSwitchFlags() []cli.Flag {
	return []cli.Flag{
		&cli.Float64Flag{Name: "switch-at", Value: 0.05, Usage: "sync-switch: fraction of the total work (--max-rounds, --epochs or --max-time) trained with BSP before switching to ASP"},
		&cli.Float64Flag{Name: "switch-asp-lr", Usage: "sync-switch: learning rate of the ASP phase (default: --lr for scale and off, --lr / ranks for keep, ramp and zero)"},
		&cli.StringFlag{Name: "switch-momentum", Value: "scale", Usage: "sync-switch: optimizer state at BSP→ASP: scale (velocity carried, momentum ÷ ranks, --lr), keep (velocity and momentum carried, --lr / ranks), ramp (as scale at --lr / ranks, momentum back to --momentum over --switch-ramp-rounds), implicit (velocity carried, momentum and lr that count asynchrony's own momentum), zero (velocity reset) or off (plain SGD at --lr, as asgd)"},
		&cli.IntFlag{Name: "switch-ramp-rounds", Value: 100, Usage: "sync-switch: --switch-momentum ramp: global rounds over which the momentum returns from momentum ÷ ranks to momentum"},
		&cli.StringFlag{Name: "switch-lr-decay", Value: "none", Usage: "sync-switch: learning-rate schedule over the whole run, both phases: none or cosine (to 0 at the run's last round; needs --epochs or --max-rounds)"},
		&cli.IntFlag{Name: "switch-train-samples", Value: 60000, Usage: "sync-switch: training-set size that turns --epochs into BSP rounds"},
		&cli.StringFlag{Name: "straggler-policy", Value: "none", Usage: "sync-switch: reaction to detected stragglers during BSP: none, greedy or elastic"},
		&cli.Float64Flag{Name: "straggler-threshold", Value: 1.5, Usage: "sync-switch: a straggler is detected when --straggler-window rounds in a row each take more than this multiple of the baseline (median) round time"},
		&cli.IntFlag{Name: "straggler-window", Value: 5, Usage: "sync-switch: consecutive straggling rounds that detect a straggler"},
		&cli.IntFlag{Name: "elastic-rounds", Value: 100, Usage: "sync-switch: global rounds of an elastic ASP excursion"},
		&cli.StringFlag{Name: "stragglers", Usage: `transient stragglers: "ranks=1,2;delay=30ms;at=20s,60s;for=10s[;mode=network|compute]" or preset:s1, preset:s2`},
	}
}

// applySyncSwitchFlags copies the sync-switch and straggler flags into cfg.
func applySyncSwitchFlags(c *cli.Context, cfg *trainer.Config) error {
	if cfg.Strategy == "sync-switch" {
		cfg.SyncSwitch = trainer.SyncSwitchConfig{
			SwitchAt: c.Float64("switch-at"), ASPLR: c.Float64("switch-asp-lr"), Momentum: c.String("switch-momentum"), TrainSamples: c.Int("switch-train-samples"), RampRounds: c.Int("switch-ramp-rounds"), Decay: c.String("switch-lr-decay"),
			Policy: c.String("straggler-policy"), Threshold: c.Float64("straggler-threshold"),
			Window: c.Int("straggler-window"), ElasticRounds: c.Int("elastic-rounds"),
		}
	}
	var err error
	cfg.Stragglers, err = trainer.ParseStragglers(c.String("stragglers"))
	return err
}
