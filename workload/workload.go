package workload

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hetsync/hetsync/trainer"
	"github.com/hetsync/hetsync/workload/data"
	"github.com/hetsync/hetsync/workload/nn"
)

// Workload is what `hetsync train` trains by default: a built-in network on Fashion-MNIST.
// Like trainer.Config, it is the same on every rank.
type Workload struct {
	// Model is the network: "mlp" or "cnn".
	Model string `json:"model"`
	// Shard is how the training set is split over ranks: "iid", "by-class" or
	// "by-class-shuffled" (workload/data).
	Shard string `json:"shard"`
	// Devices is each rank's compute device ("cpu", "cuda:N"): one entry for every rank, or
	// one per rank, so that a job can mix GPU and CPU workers. Empty means cpu.
	Devices []string `json:"devices,omitempty"`
}

// Defaults fills the zero fields with the defaults of `hetsync train`.
func (wl *Workload) Defaults() {
	if wl.Model == "" {
		wl.Model = "mlp"
	}
	if wl.Shard == "" {
		wl.Shard = "iid"
	}
}

// Validate checks wl for a job of size ranks.
func (wl *Workload) Validate(size int) error {
	if wl.Model == "" {
		return fmt.Errorf("workload: --model is empty (want mlp or cnn)")
	}
	if !slices.Contains(nn.Models(), wl.Model) {
		return fmt.Errorf("workload: --model %q: unknown (known: %s)", wl.Model, strings.Join(nn.Models(), ", "))
	}
	if _, err := data.ParseSplit(wl.Shard); err != nil {
		return fmt.Errorf("workload: --shard: %w", err)
	}
	return wl.validateDevices(size)
}

// RunRecord is what config.json records of a RunRank job by default.
type RunRecord struct {
	trainer.Config
	Workload
}
