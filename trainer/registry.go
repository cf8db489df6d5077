package trainer

import (
	"encoding/json"
	"flag"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/optim"
)

// Factory is how a registry builds one strategy: its options with their defaults, and the
// strategy for a configuration whose Options are those options, filled and validated.
type Factory struct {
	// Options returns a fresh value of the strategy's options holding their defaults.
	Options func() Options
	// New builds the strategy; cfg.Options holds a value Options returned.
	New func(cfg *Config) (Strategy, error)
	// Collectives are the collectives (Config.Collective) the strategy can run over, the
	// default first; nil means every collective, auto by default. A strategy refuses any
	// other rather than run over one it does not use.
	Collectives []string
	// Compresses says that the strategy's rounds send their vector as Config.Compress says
	// (compressed_round.go); a registry refuses Config.Compress for any other strategy.
	Compresses bool
}

// DefaultCollective is what Configure gives Config.Collective when it is empty and the
// strategy supports every collective: the communicator's own default.
const DefaultCollective = collective.DefaultAlgorithm

// Options are one strategy's own settings. The strategy owns their defaults, validation and
// help text; `hetsync train` turns Flags into its command-line flags, and config.json records
// the options under "options".
type Options interface {
	// Flags declares every option on fs: name, default (the value it sets) and help text.
	Flags(fs *flag.FlagSet)
	// Defaults fills the options whose default derives from the common configuration (an
	// ESync local learning rate that defaults to cfg.LR); it must be idempotent.
	Defaults(cfg *Config)
	// Validate checks the options for a job of size ranks, naming the flag at fault.
	Validate(cfg *Config, size int) error
}

// NoOptions is the Options of a strategy that has none.
type NoOptions struct{}

func (NoOptions) Flags(*flag.FlagSet)         {}
func (NoOptions) Defaults(*Config)            {}
func (NoOptions) Validate(*Config, int) error { return nil }

// Registry maps strategy names to factories, like database/sql's drivers. It is a value (no
// package-level table): Builtin returns one holding this package's strategies, and a program
// adds its own strategies with Register before handing the registry to Train. It also holds
// the optimizers Config.Optimizer may name (Optimizers), to which a program adds its own.
type Registry struct {
	factories  map[string]Factory
	optimizers *optim.Registry
}

// NewRegistry returns a registry without strategies, holding the built-in optimizers
// (optim.Builtin): the default optimizer is always there.
func NewRegistry() *Registry {
	return &Registry{factories: map[string]Factory{}, optimizers: optim.Builtin()}
}

// Optimizers is the registry of the optimizers Config.Optimizer may name: a program
// registers its own optimizer there (Optimizers().Register) before handing r to Train.
func (r *Registry) Optimizers() *optim.Registry { return r.optimizers }

// Register adds a strategy under name. A duplicate name, an empty name or a factory without
// Options or New is an error, as sql.Register panics on them.
func (r *Registry) Register(name string, f Factory) error {
	switch {
	case name == "":
		return fmt.Errorf("trainer: registering a strategy with an empty name")
	case f.Options == nil || f.New == nil:
		return fmt.Errorf("trainer: registering strategy %q: the factory needs both Options and New", name)
	}
	if _, dup := r.factories[name]; dup {
		return fmt.Errorf("trainer: strategy %q registered twice", name)
	}
	r.factories[name] = f
	return nil
}

// Names lists the registered strategy names, sorted.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.factories))
	for n := range r.factories {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Options returns the named strategy's options with their defaults.
func (r *Registry) Options(name string) (Options, error) {
	f, err := r.lookup(name)
	if err != nil {
		return nil, err
	}
	return f.Options(), nil
}

func (r *Registry) lookup(name string) (Factory, error) {
	if name == "" {
		return Factory{}, fmt.Errorf("trainer: Config.Strategy is empty: name one of %s", strings.Join(r.Names(), ", "))
	}
	f, ok := r.factories[name]
	if !ok {
		return Factory{}, fmt.Errorf("trainer: Config.Strategy %q: unknown (known: %s)", name, strings.Join(r.Names(), ", "))
	}
	return f, nil
}

// CheckOptionFlags refuses the strategy options given on a command line (set says whether a
// flag was given) that the strategy name does not take but other registered strategies do:
// such an option would be accepted and ignored. The error names each such flag and the
// strategies it belongs to.
func (r *Registry) CheckOptionFlags(name string, set func(flag string) bool) error {
	f, err := r.lookup(name)
	if err != nil {
		return err
	}
	own := map[string]bool{}
	optionFlags(f).VisitAll(func(fl *flag.Flag) { own[fl.Name] = true })
	owners := map[string][]string{}
	var given []string // in the order of the strategies' names, then of their flags
	for _, n := range r.Names() {
		optionFlags(r.factories[n]).VisitAll(func(fl *flag.Flag) {
			if own[fl.Name] || !set(fl.Name) {
				return
			}
			if _, seen := owners[fl.Name]; !seen {
				given = append(given, fl.Name)
			}
			owners[fl.Name] = append(owners[fl.Name], n)
		})
	}
	if len(given) == 0 {
		return nil
	}
	parts := make([]string, len(given))
	for i, fl := range given {
		parts[i] = fmt.Sprintf("--%s is an option of --sync %s", fl, strings.Join(owners[fl], ", "))
	}
	return fmt.Errorf("trainer: %s; --sync %s does not take it", strings.Join(parts, "; "), name)
}

// optionFlags is a flag set holding the flags of f's options.
func optionFlags(f Factory) *flag.FlagSet {
	fs := flag.NewFlagSet("options", flag.ContinueOnError)
	f.Options().Flags(fs)
	return fs
}

// Configure gives cfg.Options the strategy's defaults when it is nil, checks that it is the
// strategy's own options type, and fills the defaults that derive from the common
// configuration. Call it after Config.Defaults.
func (r *Registry) Configure(cfg *Config) error {
	f, err := r.lookup(cfg.Strategy)
	if err != nil {
		return err
	}
	fresh := f.Options()
	if v := reflect.ValueOf(cfg.Options); cfg.Options == nil || (v.Kind() == reflect.Pointer && v.IsNil()) {
		cfg.Options = fresh
	} else if reflect.TypeOf(cfg.Options) != reflect.TypeOf(fresh) {
		return fmt.Errorf("trainer: Config.Options of type %T for Config.Strategy %s, want %T", cfg.Options, cfg.Strategy, fresh)
	}
	cfg.Options.Defaults(cfg)
	if cfg.Collective == "" {
		cfg.Collective = defaultCollective(f, DefaultCollective)
	}
	return nil
}

// DefaultCollective is the collective the named strategy runs over when none is given and the
// caller prefers preferred: preferred if the strategy supports it, else the strategy's own
// default. `hetsync train` prefers ring; Configure prefers auto.
func (r *Registry) DefaultCollective(name, preferred string) (string, error) {
	f, err := r.lookup(name)
	if err != nil {
		return "", err
	}
	return defaultCollective(f, preferred), nil
}

func defaultCollective(f Factory, preferred string) string {
	if f.Collectives == nil || slices.Contains(f.Collectives, preferred) {
		return preferred
	}
	return f.Collectives[0]
}

// Collectives are the collectives the named strategy can run over; nil means every one.
func (r *Registry) Collectives(name string) ([]string, error) {
	f, err := r.lookup(name)
	if err != nil {
		return nil, err
	}
	return slices.Clone(f.Collectives), nil
}

// checkCollective refuses a collective the strategy cannot run over, naming the flag, the
// strategy and what it supports.
func checkCollective(f Factory, cfg *Config) error {
	if f.Collectives == nil || slices.Contains(f.Collectives, cfg.Collective) {
		return nil
	}
	return fmt.Errorf("trainer: Config.Collective %s: Config.Strategy %s runs only over %s", cfg.Collective, cfg.Strategy, strings.Join(f.Collectives, ", "))
}

// Validate checks the common configuration and the strategy's options for a job of size
// ranks, after giving the zero fields that document a default that default (ZeroDefaults);
// it configures the options (Configure).
//
// A Config it validated carries a mark of it: validating the same value again, with the same
// registry for the same job size, returns at once, so that a configuration checked where it
// entered is not checked again by every entry point it passes through.
func (r *Registry) Validate(cfg *Config, size int) error {
	if r.validated(cfg, size) {
		return nil
	}
	cfg.ZeroDefaults()
	if err := cfg.Validate(size); err != nil {
		return err
	}
	if err := r.Configure(cfg); err != nil {
		return err
	}
	if err := checkCollective(r.factories[cfg.Strategy], cfg); err != nil {
		return err
	}
	if err := checkCompress(r.factories[cfg.Strategy], cfg); err != nil {
		return err
	}
	if err := cfg.Options.Validate(cfg, size); err != nil {
		return err
	}
	if err := r.validateOptimizer(cfg); err != nil {
		return err
	}
	if err := r.validateOuter(cfg); err != nil {
		return err
	}
	cfg.checked = &checkMark{reg: r, size: size, value: fingerprint(cfg)}
	return nil
}

// validateOptimizer checks cfg's optimizer and its settings (checkOptimizer), and refuses one
// other than plain or momentum SGD for a strategy whose updates are not the workers'
// optimizer's.
func (r *Registry) validateOptimizer(cfg *Config) error {
	if err := checkOptimizer(r.optimizers, cfg); err != nil {
		return err
	}
	if !cfg.beyondSGD() {
		return nil
	}
	strat, err := r.probe(cfg)
	if err != nil {
		return err
	}
	if l, ok := strat.(localOptimizer); ok {
		lr, m, flags := l.LocalOptimizer()
		if _, err := newOptimizer(r.optimizers, cfg, lr, m); err != nil {
			return fmt.Errorf("trainer: Config.Strategy %s's local steps (%s): %w", cfg.Strategy, flags, err)
		}
	}
	return checkStrategyOptimizer(strat, cfg)
}

// validateOuter checks cfg's outer optimizer against its strategy (validateOuter), building
// the strategy only when there is one to check.
func (r *Registry) validateOuter(cfg *Config) error {
	if cfg.Outer == "" && cfg.OuterLR == 0 && cfg.OuterMomentum == nil {
		return nil
	}
	strat, err := r.probe(cfg)
	if err != nil {
		return err
	}
	return validateOuter(r.optimizers, strat, cfg)
}

// probe builds cfg's strategy only to ask it what it takes; the caller's configuration stays
// as it is.
func (r *Registry) probe(cfg *Config) (Strategy, error) {
	c := *cfg
	return r.factories[cfg.Strategy].New(&c)
}

// validated says whether r already validated cfg, as it is now, for a job of size ranks.
func (r *Registry) validated(cfg *Config, size int) bool {
	m := cfg.checked
	return m != nil && m.reg == r && (size < 0 || m.size == size) && m.value == fingerprint(cfg)
}

// fingerprint is cfg as JSON: every field and the options' values (not their pointer), so a
// change to either after a validation shows.
func fingerprint(cfg *Config) string {
	b, err := json.Marshal(cfg)
	if err != nil {
		return "" // never equal to a mark's: validated again
	}
	return string(b)
}

// New builds the strategy cfg.Strategy names, configuring its options first unless r
// validated cfg as it is (Validate).
func (r *Registry) New(cfg *Config) (Strategy, error) {
	f, err := r.lookup(cfg.Strategy)
	if err != nil {
		return nil, err
	}
	if !r.validated(cfg, -1) {
		if err := r.Configure(cfg); err != nil {
			return nil, err
		}
		if err := checkCollective(f, cfg); err != nil {
			return nil, err
		}
	}
	return f.New(cfg)
}

// Builtin returns a new registry holding the strategies of this package.
func Builtin() *Registry {
	return &Registry{optimizers: optim.Builtin(), factories: map[string]Factory{
		"local":       localFactory(),
		"ssgd":        ssgdFactory(),
		"asgd":        asgdFactory(),
		"dcasgd":      dcasgdFactory(),
		"ssp":         sspFactory(),
		"esync":       esyncFactory(),
		"wbsp":        wbspFactory(),
		"wbsp-opt":    wbspOptFactory(),
		"sync-switch": syncSwitchFactory(),
	}}
}

func noOptions() Options { return NoOptions{} }

// Strategies lists the built-in strategy names, sorted.
func Strategies() []string { return Builtin().Names() }

// NewStrategy builds the built-in strategy cfg.Strategy names.
func NewStrategy(cfg *Config) (Strategy, error) { return Builtin().New(cfg) }

// optionsOf returns cfg.Options as the strategy's own type T, or an error naming the strategy.
func optionsOf[T Options](cfg *Config, name string) (T, error) {
	o, ok := cfg.Options.(T)
	if !ok {
		var want T
		return want, fmt.Errorf("trainer: %s: options of type %T, want %T", name, cfg.Options, want)
	}
	return o, nil
}
