package config

import (
	"fmt"
	"strings"

	"github.com/fibril-go/fibril/io/broker"
)

// Validation (SPEC 14 "Validation"). Invariants:
//   - every winning value is checked against its row (range, enum, Check)
//     and the message names the key, the value, where it came from and what
//     to write instead;
//   - then the assembled broker.Config is checked by its own Validate, so
//     a relation between keys the broker needs (the outbox holds one
//     largest frame) cannot be missed here; that message names the keys
//     not at their defaults, the likeliest culprits.

func (c *Config) validate(defaults broker.Config) error {
	var errs []string
	for _, s := range c.settings {
		if err := checkValue(s.Key, s.Value); err != nil {
			errs = append(errs, fmt.Sprintf("%s = %s (from %s): %v", s.Key.Name, valueText(s.Key, s.Value), s.SourceText(), err))
		}
	}
	if len(errs) > 0 {
		return joinErrors(errs)
	}
	if err := c.Broker(defaults).Validate(); err != nil {
		var changed []string
		for _, s := range c.settings {
			if s.Source != SourceDefault {
				changed = append(changed, fmt.Sprintf("%s = %s (%s)", s.Key.Name, valueText(s.Key, s.Value), s.SourceText()))
			}
		}
		msg := fmt.Sprintf("the broker refuses this configuration: %v", err)
		if len(changed) > 0 {
			msg += "; values not at their default:\n  " + strings.Join(changed, "\n  ")
		}
		return &Error{Msg: msg}
	}
	return nil
}

// checkValue checks one value against its row.
func checkValue(k *Key, v Value) error {
	switch k.Kind {
	case KindInt:
		if v.Int < k.Min || v.Int > k.Max {
			return fmt.Errorf("%s; set a whole number from %d to %d%s", rangeReason(k, v), k.Min, k.Max, unitWord(k))
		}
	case KindString:
		if k.Enum != nil && !contains(k.Enum, v.Str) {
			return fmt.Errorf("want one of %s", strings.Join(k.Enum, ", "))
		}
	case KindUsers:
		seen := map[string]bool{}
		for _, u := range v.Users {
			if seen[u.Name] {
				return fmt.Errorf("user %s is listed twice; keep one", u.Name)
			}
			seen[u.Name] = true
		}
	}
	if k.Check != nil {
		return k.Check(v)
	}
	return nil
}

// rangeReason says why a value is out of range, in the operator's terms.
func rangeReason(k *Key, v Value) string {
	switch {
	case v.Int < k.Min && k.Min == 1 && k.Unit == "ms":
		return "must be at least 1 ms (0 makes no sense here: it would time out at once)"
	case v.Int < k.Min:
		return fmt.Sprintf("must be at least %d", k.Min)
	}
	return fmt.Sprintf("must be at most %d", k.Max)
}

func unitWord(k *Key) string {
	if k.Unit == "" {
		return ""
	}
	return " " + k.Unit
}
