package trainer

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Flag values that strategies' options need beyond the flag package's own.

// optionalFloat is a *float64 option: nil until the flag is given ("default: derived").
type optionalFloat struct{ p **float64 }

func (v optionalFloat) String() string {
	if v.p == nil || *v.p == nil {
		return ""
	}
	return strconv.FormatFloat(**v.p, 'g', -1, 64)
}

func (v optionalFloat) Set(s string) error {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return fmt.Errorf("%q is not a number", s)
	}
	*v.p = &f
	return nil
}

func (v optionalFloat) Get() any {
	if *v.p == nil {
		return 0.0
	}
	return **v.p
}

// positiveFloat is a float64 option that must be > 0 when given; hint says what to do instead.
type positiveFloat struct {
	p    *float64
	hint string
}

func (v positiveFloat) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.FormatFloat(*v.p, 'g', -1, 64)
}

func (v positiveFloat) Set(s string) error {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not a number", s)
	case f == 0:
		return fmt.Errorf("%s", v.hint)
	case !(f > 0) || math.IsInf(f, 0):
		return fmt.Errorf("%v: want a positive number", f)
	}
	*v.p = f
	return nil
}

func (v positiveFloat) Get() any { return *v.p }

// optionalInt is a *int option whose flag takes a negative number for nil.
type optionalInt struct{ p **int }

func (v optionalInt) String() string {
	if v.p == nil || *v.p == nil {
		return "-1"
	}
	return strconv.Itoa(**v.p)
}

func (v optionalInt) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("%q is not an integer", s)
	}
	if n < 0 {
		*v.p = nil
		return nil
	}
	*v.p = &n
	return nil
}

func (v optionalInt) Get() any {
	if *v.p == nil {
		return -1
	}
	return **v.p
}

// rankList is a comma-separated list of ranks ("1,3").
type rankList struct {
	p    *[]int
	name string
}

func (v rankList) String() string {
	if v.p == nil {
		return ""
	}
	s := make([]string, len(*v.p))
	for i, r := range *v.p {
		s[i] = strconv.Itoa(r)
	}
	return strings.Join(s, ",")
}

func (v rankList) Set(s string) error {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if strings.TrimSpace(f) == "" {
			continue
		}
		r, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("--%s %q: %q is not a rank number", v.name, s, f)
		}
		out = append(out, r)
	}
	*v.p = out
	return nil
}

func (v rankList) Get() any { return v.String() }
