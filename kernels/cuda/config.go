package cuda

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Config selects and configures a GPU.
type Config struct {
	// Device names the GPU: "cuda" (the same as "cuda:0") or "cuda:N" with N the CUDA device
	// ordinal (as counted by the driver, after CUDA_VISIBLE_DEVICES).
	Device string
	// ConvWorkspaceBytes bounds the device memory that Conv2D and Conv2DBackward use for
	// im2col columns; larger batches are processed in chunks. 0 means 256 MiB.
	ConvWorkspaceBytes int64
}

// DefaultConvWorkspaceBytes is the im2col workspace bound when Config leaves it 0.
const DefaultConvWorkspaceBytes = 256 << 20

// Validate reports a configuration that cannot name a device.
func (c Config) Validate() error {
	if _, err := ParseDevice(c.Device); err != nil {
		return err
	}
	if c.ConvWorkspaceBytes < 0 {
		return fmt.Errorf("kernels/cuda: conv workspace of %d bytes, want ≥ 0 (0 means %d)", c.ConvWorkspaceBytes, DefaultConvWorkspaceBytes)
	}
	return nil
}

func (c Config) convWorkspaceBytes() int64 {
	if c.ConvWorkspaceBytes == 0 {
		return DefaultConvWorkspaceBytes
	}
	return c.ConvWorkspaceBytes
}

// maxOrdinal bounds device ordinals to catch typos; no machine has this many GPUs.
const maxOrdinal = 1 << 10

// ParseDevice returns the device ordinal that name ("cuda" or "cuda:N") selects.
func ParseDevice(name string) (int, error) {
	rest, ok := strings.CutPrefix(name, "cuda")
	if !ok {
		return 0, fmt.Errorf("kernels/cuda: device %q: want \"cuda\" or \"cuda:N\"", name)
	}
	if rest == "" {
		return 0, nil
	}
	num, ok := strings.CutPrefix(rest, ":")
	if !ok {
		return 0, fmt.Errorf("kernels/cuda: device %q: want \"cuda\" or \"cuda:N\"", name)
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || n >= maxOrdinal || num != strconv.Itoa(n) {
		return 0, fmt.Errorf("kernels/cuda: device %q: ordinal %q is not a device number 0..%d", name, num, maxOrdinal-1)
	}
	return n, nil
}

// ErrNotBuilt is what Open returns in binaries built without the cuda tag.
var ErrNotBuilt = errors.New("kernels/cuda: this binary was built without CUDA support; rebuild with `make cuda` (go build -tags cuda)")
