//go:build !cuda && !cudaemu

package cuda

import (
	"github.com/hetsync/hetsync/kernels"
)

// Built reports whether this binary was built with CUDA support (the cuda build tag).
const Built = false

// Open opens the GPU that cfg names. In this build it validates cfg and returns ErrNotBuilt.
func Open(cfg Config) (kernels.Device, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return nil, ErrNotBuilt
}
