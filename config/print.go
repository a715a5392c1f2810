package config

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Printing the effective configuration (--print-config, GET
// /admin/api/startup-config). Invariants:
//   - the text form is one `key = value  # source` line per key, in table
//     order, and is itself valid TOML: it can be saved as a config file
//     (once the redacted passwords are filled in);
//   - a Secret value is never printed: its passwords show as Redacted.

// Redacted stands for a secret in every printed form.
const Redacted = "<redacted>"

// Print writes the text form to w.
func (c *Config) Print(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintln(&b, "# fibril serve: the effective configuration (defaults < file < env < flags)")
	if c.File != "" {
		fmt.Fprintf(&b, "# config file: %s (named by %s)\n", c.File, c.FileFrom)
	} else {
		fmt.Fprintf(&b, "# config file: none (--config PATH or %s names one)\n", ConfigEnv)
	}
	width := 0
	for _, s := range c.settings {
		width = max(width, len(s.Key.Name)+3+len(valueText(s.Key, s.Value)))
	}
	for _, s := range c.settings {
		line := s.Key.Name + " = " + valueText(s.Key, s.Value)
		fmt.Fprintf(&b, "%-*s  # %s\n", width, line, s.SourceText())
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Value is one printed value: the shape of GET /admin/api/startup-config
// and --print-config=json.
type PrintedValue struct {
	Key    string `json:"key"`
	Value  any    `json:"value"`
	Source string `json:"source"`
	// Origin is the file, variable or flag; absent for a default.
	Origin string `json:"origin,omitempty"`
}

// Values returns every effective value, secrets redacted.
func (c *Config) Values() []PrintedValue {
	out := make([]PrintedValue, 0, len(c.settings))
	for _, s := range c.settings {
		out = append(out, PrintedValue{Key: s.Key.Name, Value: jsonValue(s.Key, s.Value),
			Source: s.Source.String(), Origin: s.Origin})
	}
	return out
}

// PrintJSON writes {"values":[...]} to w.
func (c *Config) PrintJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(map[string]any{"file": c.File, "values": c.Values()})
}

// valueText renders v as a TOML literal, secrets redacted.
func valueText(k *Key, v Value) string {
	switch k.Kind {
	case KindString:
		if k.Secret && v.Str != "" {
			return strconv.Quote(Redacted)
		}
		return strconv.Quote(v.Str)
	case KindBool:
		return strconv.FormatBool(v.Bool)
	case KindInt:
		return strconv.FormatInt(v.Int, 10)
	case KindUsers:
		parts := make([]string, 0, len(v.Users))
		for _, u := range v.Users {
			parts = append(parts, fmt.Sprintf("{name = %s, password = %s}", strconv.Quote(u.Name), strconv.Quote(Redacted)))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	panic("config: unknown kind")
}

// jsonValue is v as a JSON-ready value, secrets redacted.
func jsonValue(k *Key, v Value) any {
	switch k.Kind {
	case KindString:
		if k.Secret && v.Str != "" {
			return Redacted
		}
		return v.Str
	case KindBool:
		return v.Bool
	case KindInt:
		return v.Int
	case KindUsers:
		users := make([]map[string]string, 0, len(v.Users))
		for _, u := range v.Users {
			users = append(users, map[string]string{"name": u.Name, "password": Redacted})
		}
		return users
	}
	panic("config: unknown kind")
}

// quoteSecret is text for an error message: redacted for a secret key.
func quoteSecret(k *Key, text string) string {
	if k.Secret {
		return Redacted
	}
	return text
}

// NonDefault lists the values not at their default as "key=value (source)",
// secrets redacted: the start's log line of what was configured.
func (c *Config) NonDefault() []string {
	var out []string
	for _, s := range c.settings {
		if s.Source != SourceDefault {
			out = append(out, s.Key.Name+"="+valueText(s.Key, s.Value)+" ("+s.SourceText()+")")
		}
	}
	return out
}
