package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The start barrier checks that the ranks share the configuration: strategies rely on every
// rank agreeing on it, and a rank that trains with another learning rate or strategy would
// otherwise split the job silently or fail later with a bare mismatch of collectives.

// maxAgreement bounds one rank's encoded settings (a few hundred bytes in practice).
const maxAgreement = 1 << 20

// setting is one setting every rank must share, by the Go name of its field.
type setting struct{ Name, Value string }

// agreedSettings lists what every rank of w's job must share: every field of the Config, the
// strategy's options included, except those tagged agree:"per-rank" (Config says why each is
// a rank's own); the model's parameter count; and the checkpoint the run resumes from (its
// round, and for a whole-job checkpoint its checksum: every rank must read the same file).
func agreedSettings(w *Worker, resume *Checkpoint) []setting {
	var out []setting
	flatten("Config", reflect.ValueOf(w.Cfg).Elem(), &out)
	out = append(out, setting{"the model's parameter count", strconv.Itoa(len(w.Params))})
	ck := setting{"the checkpoint resumed from", "none"}
	if resume != nil {
		ck.Value = fmt.Sprintf("round %d", resume.Round)
		if resume.Rank == nil {
			ck.Value += fmt.Sprintf(" (crc32c %08x)", resume.CRC32C)
		}
	}
	return append(out, ck)
}

// flatten appends v's settings under name: a struct's fields one by one (Name.Field), an
// interface's dynamic type and then its value's fields, every other value formatted.
func flatten(name string, v reflect.Value, out *[]setting) {
	switch v.Kind() {
	case reflect.Interface:
		if v.IsNil() {
			*out = append(*out, setting{name, "none"})
			return
		}
		*out = append(*out, setting{name + " type", v.Elem().Type().String()})
		flatten(name, v.Elem(), out)
	case reflect.Pointer:
		if v.IsNil() {
			*out = append(*out, setting{name, "unset"})
			return
		}
		flatten(name, v.Elem(), out)
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() || f.Tag.Get("agree") == "per-rank" {
				continue
			}
			n := name + "." + f.Name
			if f.Anonymous {
				n = name // an embedded struct's fields are the outer struct's
			}
			flatten(n, v.Field(i), out)
		}
	default:
		*out = append(*out, setting{name, formatValue(v)})
	}
}

// formatValue writes v as a user would type it: 0.1, 250ms, "ring", [1 3].
func formatValue(v reflect.Value) string {
	if d, ok := v.Interface().(time.Duration); ok {
		return d.String()
	}
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case reflect.String:
		return strconv.Quote(v.String())
	case reflect.Slice, reflect.Array:
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = formatValue(v.Index(i))
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return fmt.Sprint(v.Interface())
}

// agreeStart is the start barrier: every rank sends rank 0 its agreedSettings, rank 0 compares
// them with its own and answers every rank with the verdict, and the ranks leave together,
// all with the same error when the settings differ (naming each setting, its values and the
// ranks that hold them). It costs rank 0 one small message from and to every rank, as any
// barrier on the control channel does.
func agreeStart(ctx context.Context, w *Worker, resume *Checkpoint) error {
	mine, err := json.Marshal(agreedSettings(w, resume))
	if err != nil {
		return fmt.Errorf("trainer: rank %d: encoding the settings to agree on: %w", w.Rank, err)
	}
	ep := w.Endpoint
	if w.Rank != 0 {
		if err := sendBlob(ctx, ep, 0, ctrlStart, mine); err != nil {
			return fmt.Errorf("trainer: rank %d: start barrier: %w", w.Rank, err)
		}
		verdict, err := recvBlob(ctx, ep, 0, ctrlStart, maxAgreement)
		if err != nil {
			return fmt.Errorf("trainer: rank %d: start barrier: %w", w.Rank, err)
		}
		if len(verdict) > 0 {
			return fmt.Errorf("trainer: rank %d: %s", w.Rank, verdict)
		}
		return nil
	}
	all := make([][]setting, w.Size)
	if err := json.Unmarshal(mine, &all[0]); err != nil {
		return fmt.Errorf("trainer: rank 0: decoding its own settings: %w", err)
	}
	for r := 1; r < w.Size; r++ {
		b, err := recvBlob(ctx, ep, r, ctrlStart, maxAgreement)
		if err != nil {
			return fmt.Errorf("trainer: rank 0: start barrier: waiting for rank %d: %w", r, err)
		}
		if err := json.Unmarshal(b, &all[r]); err != nil {
			return fmt.Errorf("trainer: rank 0: start barrier: the settings of rank %d: %w", r, err)
		}
	}
	var verdict []byte
	if msg := compareSettings(all); msg != "" {
		verdict = []byte(msg)
	}
	for r := 1; r < w.Size; r++ {
		if err := sendBlob(ctx, ep, r, ctrlStart, verdict); err != nil {
			return fmt.Errorf("trainer: rank 0: start barrier: releasing rank %d: %w", r, err)
		}
	}
	if verdict != nil {
		return fmt.Errorf("trainer: rank 0: %s", verdict)
	}
	return nil
}

// compareSettings says which settings differ between the ranks (all[r] is rank r's), as
// "config differs between ranks: Config.LR is 0.1 on rank 0 but 0.3 on ranks 1-3"; "" when
// every rank holds the same.
func compareSettings(all [][]setting) string {
	values := make([]map[string]string, len(all))
	var names []string // in rank 0's order, then any only other ranks have
	seen := map[string]bool{}
	for r, list := range all {
		values[r] = make(map[string]string, len(list))
		for _, s := range list {
			values[r][s.Name] = s.Value
			if !seen[s.Name] {
				seen[s.Name] = true
				names = append(names, s.Name)
			}
		}
	}
	var diffs []string
	var retyped []string // values of different types: their fields are not compared one by one
	for _, name := range names {
		if slices.ContainsFunc(retyped, func(p string) bool { return strings.HasPrefix(name, p+".") }) {
			continue
		}
		var order []string // distinct values, rank 0's first
		holders := map[string][]int{}
		for r := range all {
			v, ok := values[r][name]
			if !ok {
				v = "absent"
			}
			if _, ok := holders[v]; !ok {
				order = append(order, v)
			}
			holders[v] = append(holders[v], r)
		}
		if len(order) == 1 {
			continue
		}
		parts := make([]string, len(order))
		for i, v := range order {
			parts[i] = v + " on " + rankSet(holders[v])
		}
		diffs = append(diffs, name+" is "+parts[0]+" but "+strings.Join(parts[1:], " and "))
		if typed, ok := strings.CutSuffix(name, " type"); ok {
			retyped = append(retyped, typed)
		}
	}
	if len(diffs) == 0 {
		return ""
	}
	return "config differs between ranks: " + strings.Join(diffs, "; ")
}

// rankSet writes sorted ranks as "rank 0", "ranks 1,3" or "ranks 1-3,7".
func rankSet(ranks []int) string {
	slices.Sort(ranks)
	var parts []string
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && ranks[j+1] == ranks[j]+1 {
			j++
		}
		switch {
		case j == i:
			parts = append(parts, strconv.Itoa(ranks[i]))
		case j == i+1:
			parts = append(parts, strconv.Itoa(ranks[i]), strconv.Itoa(ranks[j]))
		default:
			parts = append(parts, fmt.Sprintf("%d-%d", ranks[i], ranks[j]))
		}
		i = j + 1
	}
	if len(ranks) == 1 {
		return "rank " + parts[0]
	}
	return "ranks " + strings.Join(parts, ",")
}
