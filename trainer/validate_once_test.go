package trainer_test

import (
	"flag"
	"sync/atomic"
	"testing"

	"github.com/hetsync/hetsync/trainer"
)

// countedOptions count their validations.
type countedOptions struct{ n *atomic.Int32 }

func (o countedOptions) Flags(*flag.FlagSet)                 {}
func (o countedOptions) Defaults(*trainer.Config)            {}
func (o countedOptions) Validate(*trainer.Config, int) error { o.n.Add(1); return nil }

// TestConfigValidatedOnce: a configuration validated where it enters is carried as one value
// through Train on every rank without being checked again; changed after its validation, it is
// checked anew.
func TestConfigValidatedOnce(t *testing.T) {
	var n atomic.Int32
	reg := trainer.Builtin()
	if err := reg.Register("counted", trainer.Factory{
		Options: func() trainer.Options { return countedOptions{&n} },
		New: func(cfg *trainer.Config) (trainer.Strategy, error) {
			c := *cfg
			c.Strategy, c.Options = "ssgd", nil
			return trainer.Builtin().New(&c)
		},
	}); err != nil {
		t.Fatal(err)
	}
	const size = 3
	cfg := trainer.Config{Strategy: "counted", Batch: 7, LR: 0.05, MaxRounds: 4, Seed: 1}
	if err := reg.Validate(&cfg, size); err != nil {
		t.Fatal(err)
	}
	trainRegression(t, cfg, size, reg)
	if got := n.Load(); got != 1 {
		t.Fatalf("the strategy's options were validated %d times; want once, where the configuration entered", got)
	}
	changed := cfg
	changed.LR = 0.04 // after its validation: Train must check it
	trainRegression(t, changed, size, reg)
	if got := n.Load(); got != 1+size {
		t.Fatalf("a configuration changed after its validation was validated %d more times; want once on each of %d ranks", got-1, size)
	}
}
