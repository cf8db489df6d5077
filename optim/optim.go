package optim

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Optimizer updates a parameter vector in place from its gradient and keeps whatever state
// the rule needs between steps.
type Optimizer interface {
	// Name is the name the optimizer is registered under ("sgd", "adam", "adamw").
	Name() string
	// Step applies one update to params from the gradient scale·grads (grads at least as
	// long as params). scale lets a caller that holds the sum of several gradients apply
	// their mean without a pass of its own over the vector; the trainer's strategies pass 1.
	// The first step allocates the state for len(params) values; every later step must be
	// given a vector of that length.
	Step(params, grads []float32, scale float32)
	// AppendState appends the optimizer's state to b in the optimizer's own little-endian
	// encoding: empty before the first step (and for stateless rules).
	AppendState(b []byte) []byte
	// LoadState replaces the state with what AppendState encoded for a vector of n values,
	// so that the next Step computes exactly what it would have computed in the optimizer
	// that encoded it. Empty state resets the optimizer to before its first step. A state of
	// another optimizer, length or setting is an error saying what it holds.
	LoadState(state []byte, n int) error
}

// Settings are the hyperparameters an optimizer is built with, in the words of `hetsync
// train`'s flags (--lr, --momentum, ...). Each optimizer reads the ones its Factory.Uses
// names, besides LR, and ignores the rest.
type Settings struct {
	LR          float64 // learning rate, > 0
	Momentum    float64 // SGD's momentum in [0, 1)
	Dampening   float64 // SGD's dampening of the gradient in the velocity, in [0, 1]
	Nesterov    bool    // SGD's Nesterov momentum (needs Momentum > 0 and Dampening 0)
	Beta1       float64 // Adam's first-moment decay in [0, 1)
	Beta2       float64 // Adam's second-moment decay in [0, 1)
	Eps         float64 // Adam's term added to the denominator, > 0
	WeightDecay float64 // L2 penalty (SGD, Adam) or decoupled decay (AdamW), ≥ 0
}

// The settings a Factory may use, by the name of the flag that sets them.
const (
	SettingMomentum    = "momentum"
	SettingDampening   = "dampening"
	SettingNesterov    = "nesterov"
	SettingBeta1       = "beta1"
	SettingBeta2       = "beta2"
	SettingEps         = "eps"
	SettingWeightDecay = "weight-decay"
)

// Factory is how a registry builds one optimizer.
type Factory struct {
	// Uses names the settings (Setting*) the optimizer reads besides LR. A caller refuses a
	// setting given for an optimizer that does not use it, rather than ignore it.
	Uses []string
	// Defaults holds the values of Beta1, Beta2 and Eps that a caller gives the optimizer
	// when they are used and not given (a zero Beta1 is a valid choice, so zero cannot mean
	// "default").
	Defaults Settings
	// New builds the optimizer for a vector of any length, checking the settings it uses
	// and naming the flag at fault. It allocates no state: the first Step does.
	New func(s Settings) (Optimizer, error)
}

// Registry maps optimizer names to factories, like the trainer's strategies: a value, with
// no package-level table. Builtin returns one holding this package's optimizers.
type Registry struct {
	factories map[string]Factory
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{factories: map[string]Factory{}} }

// Builtin returns a new registry holding sgd, adam and adamw.
func Builtin() *Registry {
	return &Registry{factories: map[string]Factory{
		"sgd":   sgdFactory(),
		"adam":  adamFactory(false),
		"adamw": adamFactory(true),
	}}
}

// Register adds an optimizer under name. An empty or duplicate name, a factory without New,
// or one that uses a setting this package does not know is an error.
func (r *Registry) Register(name string, f Factory) error {
	switch {
	case name == "":
		return fmt.Errorf("optim: registering an optimizer with an empty name")
	case f.New == nil:
		return fmt.Errorf("optim: registering optimizer %q: the factory needs New", name)
	}
	for _, u := range f.Uses {
		if !slices.Contains(settingNames, u) {
			return fmt.Errorf("optim: registering optimizer %q: it uses %q, not a setting (known: %s)", name, u, strings.Join(settingNames, ", "))
		}
	}
	if _, dup := r.factories[name]; dup {
		return fmt.Errorf("optim: optimizer %q registered twice", name)
	}
	r.factories[name] = f
	return nil
}

// settingNames are the settings a Factory may use, in the order errors list them.
var settingNames = []string{SettingMomentum, SettingDampening, SettingNesterov, SettingBeta1, SettingBeta2, SettingEps, SettingWeightDecay}

// Names lists the registered names, sorted.
func (r *Registry) Names() []string { return slices.Sorted(maps.Keys(r.factories)) }

// Lookup returns the factory registered under name, or an error listing the known names.
func (r *Registry) Lookup(name string) (Factory, error) {
	f, ok := r.factories[name]
	if !ok {
		return Factory{}, fmt.Errorf("optim: unknown optimizer %q (known: %s)", name, strings.Join(r.Names(), ", "))
	}
	return f, nil
}

// New builds the optimizer registered under name with s.
func (r *Registry) New(name string, s Settings) (Optimizer, error) {
	f, err := r.Lookup(name)
	if err != nil {
		return nil, err
	}
	return f.New(s)
}

// UsesSetting reports whether the optimizer f builds reads setting.
func (f Factory) UsesSetting(setting string) bool { return slices.Contains(f.Uses, setting) }
