package main

import (
	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync/trainer"
)

// esyncFlags are the flags of --sync esync (trainer.ESyncConfig).
func esyncFlags() []cli.Flag {
	return []cli.Flag{
		&cli.Float64Flag{Name: "local-lr", Usage: "esync: learning rate η of the local SGD steps (default: --lr)"},
		&cli.Float64Flag{Name: "local-momentum", Usage: "esync: momentum of the local steps (default: --momentum; 0 is the paper's plain SGD; each rank keeps its own velocity)"},
		&cli.Float64Flag{Name: "global-lr", Value: 1, Usage: "esync: global learning rate γ in w ← w + γ·ΣΔ/N"},
		&cli.StringFlag{Name: "esync-epsilon", Value: "auto", Usage: "esync: the state service's ε: auto (0.1× the median step time), a factor (0.25x) or a duration (0.5s, the original's)"},
		&cli.StringFlag{Name: "esync-queries", Value: trainer.ESyncBlocking, Usage: "esync: blocking (the original's code: wait for every answer) or nonblocking (the paper's §4.2: a rank computes its next step while its query to the state service is in flight, and drops that step on READY)"},
	}
}

// applyESyncFlags copies the esync flags into cfg.
func applyESyncFlags(c *cli.Context, cfg *trainer.Config) error {
	if cfg.Strategy != "esync" {
		return nil
	}
	cfg.ESync.LocalLR = c.Float64("local-lr")
	if c.IsSet("local-momentum") {
		m := c.Float64("local-momentum")
		cfg.ESync.LocalMomentum = &m
	}
	cfg.ESync.GlobalLR = c.Float64("global-lr")
	cfg.ESync.Queries = c.String("esync-queries")
	fixed, factor, err := trainer.ParseESyncEpsilon(c.String("esync-epsilon"))
	if err != nil {
		return err
	}
	cfg.ESync.Epsilon, cfg.ESync.EpsilonFactor = fixed, factor
	return nil
}
