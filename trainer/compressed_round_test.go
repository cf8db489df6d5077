package trainer

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// TestESyncCheckpointKeepsTheErrorFeedback: an esync part saves the rank's error-feedback
// residual and a resumed rank continues with it bitwise; a part without one (a run without
// compression) resumes with a zero residual, and a residual is refused by a run without
// compression.
func TestESyncCheckpointKeepsTheErrorFeedback(t *testing.T) {
	const n = 1000
	w := &Worker{Params: make([]float32, n)}
	strategy := func(compress string) *esync {
		r, err := newRoundReducer(&Config{Compress: compress}, n, esyncExtra)
		if err != nil {
			t.Fatal(err)
		}
		return &esync{reduce: r, pre: make([]float32, n)}
	}
	saved := strategy("int8")
	saved.opt.Velocity = make([]float32, n)
	res := make([]float32, n)
	for i := range res {
		res[i] = float32(math.Sin(float64(i))) * 1e-3
		saved.opt.Velocity[i] = float32(i)
	}
	if err := saved.reduce.how.Feedback.SetResidual(res); err != nil {
		t.Fatal(err)
	}
	state, err := saved.CheckpointState(w)
	if err != nil {
		t.Fatal(err)
	}
	resumed := strategy("int8")
	if err := resumed.RestoreState(w, state, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(resumed.reduce.how.Feedback.Residual(), res) || !slices.Equal(resumed.opt.Velocity, saved.opt.Velocity) {
		t.Fatal("the resumed rank's residual or velocity differs from the saved one")
	}
	if err := strategy("none").RestoreState(w, state, nil); err == nil || !strings.Contains(err.Error(), "Config.Compress is none") {
		t.Errorf("a residual restored into a run without compression: %v", err)
	}
	plain, err := strategy("none").CheckpointState(w)
	if err != nil {
		t.Fatal(err)
	}
	if err := resumed.RestoreState(w, plain, nil); err != nil || slices.ContainsFunc(resumed.reduce.how.Feedback.Residual(), func(v float32) bool { return v != 0 }) {
		t.Errorf("a part without a residual: %v, residual not zero", err)
	}
	if err := resumed.RestoreState(w, state[:len(state)-4], nil); err == nil {
		t.Error("a truncated residual was restored")
	}
}
