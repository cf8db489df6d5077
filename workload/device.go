package workload

import (
	"fmt"
	"strings"

	"github.com/hetsync/hetsync/kernels"
	"github.com/hetsync/hetsync/kernels/cuda"
)

// DeviceFor is the compute device of rank: Devices[rank] when there is one per rank, the
// single entry when there is one, else "cpu".
func (c *Workload) DeviceFor(rank int) string {
	switch len(c.Devices) {
	case 0:
		return "cpu"
	case 1:
		return c.Devices[0]
	}
	return c.Devices[rank]
}

// ParseDevices parses --device: one device for every rank ("cpu", "cuda", "cuda:N") or a
// comma-separated list with one per rank ("cuda:0,cpu,cpu,cpu").
func ParseDevices(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		parts[i] = p
		if err := checkDevice(p); err != nil {
			return nil, fmt.Errorf("--device %q: entry %d: %w", s, i, err)
		}
	}
	return parts, nil
}

func checkDevice(name string) error {
	if name == "cpu" {
		return nil
	}
	if _, err := cuda.ParseDevice(name); err != nil {
		return fmt.Errorf("unknown device %q (want cpu, cuda or cuda:N)", name)
	}
	return nil
}

// validateDevices checks Devices against the job size.
func (c *Workload) validateDevices(size int) error {
	if len(c.Devices) > 1 && len(c.Devices) != size {
		return fmt.Errorf("workload: --device lists %d devices for %d ranks: give one for all ranks or one per rank", len(c.Devices), size)
	}
	for i, d := range c.Devices {
		if err := checkDevice(d); err != nil {
			return fmt.Errorf("workload: --device entry %d: %w", i, err)
		}
	}
	return nil
}

// openDevice opens a rank's compute device. A CUDA device in a binary built without the cuda
// tag is an error that says how to build one (make cuda).
func openDevice(rank int, name string, threads int) (kernels.Device, error) {
	if name == "cpu" {
		dev, err := kernels.NewCPU(threads)
		if err != nil {
			return nil, fmt.Errorf("workload: rank %d: device cpu: %w", rank, err)
		}
		return dev, nil
	}
	dev, err := cuda.Open(cuda.Config{Device: name})
	if err != nil {
		return nil, fmt.Errorf("workload: rank %d: device %s: %w", rank, name, err)
	}
	return dev, nil
}
