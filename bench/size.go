package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseSize parses a byte count such as "8", "4K", "256M", "1G", "2KiB" or "64MB". Suffixes are
// binary (K = 1024), as in nccl-tests; case is ignored.
func ParseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	if t == "" {
		return 0, fmt.Errorf("size %q: empty", s)
	}
	t = strings.TrimSuffix(t, "B")
	t = strings.TrimSuffix(t, "I")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult != 1 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("size %q: want a non-negative integer with an optional K, M, G or T suffix", s)
	}
	if v > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return v * mult, nil
}

// FormatSize writes n in the shortest exact form ParseSize reads back ("4K", "256M", "1000").
func FormatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// Sweep returns the sizes min, min×factor, ... up to max (inclusive), as nccl-tests' -b -e -f.
// When min == max it returns that one size.
func Sweep(min, max int64, factor int) ([]int64, error) {
	if min < 1 {
		return nil, fmt.Errorf("-b %d: minimum size must be at least 1 byte", min)
	}
	if max < min {
		return nil, fmt.Errorf("-e %s is smaller than -b %s", FormatSize(max), FormatSize(min))
	}
	if factor < 2 && min != max {
		return nil, fmt.Errorf("-f %d: the step factor must be at least 2", factor)
	}
	var sizes []int64
	for s := min; s <= max; {
		sizes = append(sizes, s)
		if min == max || s > max/int64(factor) {
			break
		}
		s *= int64(factor)
	}
	return sizes, nil
}
