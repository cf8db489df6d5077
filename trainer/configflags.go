package trainer

import (
	"flag"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// SetFlag sets the Config field whose flag tag is name ("lr", "slowdown", "max-time") from
// the text `hetsync train --name value` takes. It is how a caller that is not the command
// line (the Python package, through the C ABI) states a configuration in the command's own
// words; Validate then checks it as it checks the command's.
func (c *Config) SetFlag(name, value string) error {
	v := reflect.ValueOf(c).Elem()
	f, ok := configFlagField(name)
	if !ok {
		return fmt.Errorf("trainer: --%s is not a setting of the training configuration", name)
	}
	field := v.FieldByIndex(f.Index)
	bad := func(err error) error { return fmt.Errorf("trainer: --%s %q: %w", name, value, err) }
	switch p := field.Addr().Interface().(type) {
	case *string:
		*p = value
	case *int:
		n, err := strconv.Atoi(value)
		if err != nil {
			return bad(err)
		}
		*p = n
	case *uint64:
		n, err := strconv.ParseUint(value, 10, 64)
		if err != nil {
			return bad(err)
		}
		*p = n
	case *float64:
		x, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return bad(err)
		}
		*p = x
	case **float64:
		x, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return bad(err)
		}
		*p = &x
	case *bool:
		b, err := strconv.ParseBool(value)
		if err != nil {
			return bad(err)
		}
		*p = b
	case *time.Duration:
		d, err := time.ParseDuration(value)
		if err != nil {
			return bad(err)
		}
		*p = d
	case *EvalEvery:
		e, err := ParseEvery(name, value)
		if err != nil {
			return err
		}
		*p = e
	case *[]float64:
		l, err := ParseFloatList(name, value)
		if err != nil {
			return err
		}
		*p = l
	case *[]time.Duration:
		l, err := ParseMillisList(name, value)
		if err != nil {
			return err
		}
		*p = l
	case *StragglerConfig:
		s, err := ParseStragglers(value)
		if err != nil {
			return err
		}
		*p = s
	default:
		return fmt.Errorf("trainer: --%s cannot be set from text", name)
	}
	return nil
}

// configFlagField is the Config field whose flag tag is name.
func configFlagField(name string) (reflect.StructField, bool) {
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		if f := t.Field(i); f.Tag.Get("flag") == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// ConfigFromFlags is the configuration that `hetsync train` would make of flags (name and
// value pairs, names without dashes): Config's own flags, then the options of the strategy
// that "sync" names (reg's), then the defaults of the flags not given (DefaultsUnset). A
// flag of neither is an error naming it. The result still needs Validate, as the command's does.
func ConfigFromFlags(reg *Registry, flags [][2]string) (Config, error) {
	var cfg Config
	given := map[string]bool{}
	var rest [][2]string
	for _, kv := range flags {
		name := strings.TrimLeft(kv[0], "-")
		given[name] = true
		if _, ok := configFlagField(name); ok {
			if err := cfg.SetFlag(name, kv[1]); err != nil {
				return cfg, err
			}
			continue
		}
		rest = append(rest, [2]string{name, kv[1]})
	}
	cfg.DefaultsUnset(func(f string) bool { return given[f] })
	opts, err := reg.Options(cfg.Strategy)
	if err != nil {
		return cfg, err
	}
	fs := flag.NewFlagSet(cfg.Strategy, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	opts.Flags(fs)
	if err := reg.CheckOptionFlags(cfg.Strategy, func(f string) bool { return given[f] }); err != nil {
		return cfg, err
	}
	for _, kv := range rest {
		if fs.Lookup(kv[0]) == nil {
			return cfg, fmt.Errorf("trainer: --%s is neither a training setting nor an option of --sync %s (%s)", kv[0], cfg.Strategy, optionNames(fs))
		}
		if err := fs.Set(kv[0], kv[1]); err != nil {
			return cfg, fmt.Errorf("trainer: --%s %q: %w", kv[0], kv[1], err)
		}
	}
	cfg.Options = opts
	return cfg, nil
}

func optionNames(fs *flag.FlagSet) string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, "--"+f.Name) })
	if len(names) == 0 {
		return "it takes none"
	}
	return "its options: " + strings.Join(names, ", ")
}
