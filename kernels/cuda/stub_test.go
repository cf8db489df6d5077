//go:build !cuda && !cudaemu

package cuda

import (
	"errors"
	"testing"
)

func TestOpenWithoutCUDA(t *testing.T) {
	if Built {
		t.Fatal("Built is true in a build without the cuda tag")
	}
	d, err := Open(Config{Device: "cuda:0"})
	if d != nil || !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("Open = %v, %v; want nil, ErrNotBuilt", d, err)
	}
}
