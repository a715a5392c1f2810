package config

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/fibril-go/fibril/io/broker"
)

// The TOML file. Invariants:
//   - a key is a dotted path through tables (`[delivery]` then
//     `inflight_ttl_ms = 1`, or `delivery.inflight_ttl_ms = 1` at the top);
//     both spell the same key;
//   - every path in the file is a key of the table or a table on the way to
//     one; anything else is an unknown key, reported with the nearest known
//     key;
//   - a value must have the key's TOML type: no string "30000" for an
//     integer, no 1.5 for milliseconds.

// fileBytesMax bounds the config file read: a config is a few KiB; a huge
// file is a wrong path (a log, a binary), not a configuration.
const fileBytesMax = 1 << 20

// readFile parses the TOML file at path into the file layer.
func readFile(table []Key, byName map[string]*Key, path, from string, read func(string) ([]byte, error)) (layer, []string) {
	data, err := read(path)
	if err != nil {
		return nil, []string{fmt.Sprintf("config file %s (from %s): %v; check the path, or unset %s", path, from, err, from)}
	}
	if len(data) > fileBytesMax {
		return nil, []string{fmt.Sprintf("config file %s (from %s) is %d bytes, over %d: is it the right file?", path, from, len(data), fileBytesMax)}
	}
	var doc map[string]any
	if _, err := toml.Decode(string(data), &doc); err != nil {
		var perr toml.ParseError
		if errors.As(err, &perr) {
			msg := fmt.Sprintf("config file %s: line %d: %s", path, perr.Position.Line, perr.Message)
			if perr.Usage != "" {
				msg += " (" + strings.Join(strings.Fields(perr.Usage), " ") + ")"
			}
			return nil, []string{msg + "; fix the TOML syntax there"}
		}
		return nil, []string{fmt.Sprintf("config file %s: %v", path, err)}
	}
	tables := map[string][]string{} // table path -> the names directly under it
	for _, k := range table {
		parts := strings.Split(k.Name, ".")
		for i := 1; i < len(parts); i++ {
			prefix := strings.Join(parts[:i], ".")
			if !contains(tables[prefix], parts[i]) {
				tables[prefix] = append(tables[prefix], parts[i])
			}
		}
	}
	l, errs := layer{}, []string(nil)
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		names := make([]string, 0, len(m))
		for name := range m {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			full := name
			if prefix != "" {
				full = prefix + "." + name
			}
			raw := m[name]
			if k, ok := byName[full]; ok {
				v, err := fromTOML(k, raw)
				if err != nil {
					errs = append(errs, fmt.Sprintf("config file %s:%s key %s: %v", path, lineText(data, full), full, err))
					continue
				}
				l[full] = assignment{value: v, origin: path}
				continue
			}
			if under, ok := tables[full]; ok {
				sub, isTable := raw.(map[string]any)
				if !isTable {
					errs = append(errs, fmt.Sprintf("config file %s: %s is a table, not a value; set the keys under it: %s",
						path, full, strings.Join(under, ", ")))
					continue
				}
				walk(full, sub)
				continue
			}
			if sub, isTable := raw.(map[string]any); isTable && len(sub) > 0 {
				walk(full, sub) // an unknown table: each key in it is unknown, with its own suggestion
				continue
			}
			errs = append(errs, fmt.Sprintf("config file %s:%s unknown key %s; did you mean %s? (docs/configuration.md lists every key)",
				path, lineText(data, full), full, nearestKey(full, table)))
		}
	}
	walk("", doc)
	return l, errs
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// fromTOML converts a decoded TOML value to k's kind.
func fromTOML(k *Key, raw any) (Value, error) {
	switch k.Kind {
	case KindString:
		s, ok := raw.(string)
		if !ok {
			return Value{}, fmt.Errorf("want a string in quotes, got %s", tomlType(raw))
		}
		return parseText(k, s)
	case KindBool:
		b, ok := raw.(bool)
		if !ok {
			return Value{}, fmt.Errorf("want true or false (no quotes), got %s", tomlType(raw))
		}
		return Bool(b), nil
	case KindInt:
		switch n := raw.(type) {
		case int64:
			return Int(n), nil
		case float64:
			if n == math.Trunc(n) && math.Abs(n) < 1<<53 {
				return Int(int64(n)), nil
			}
			return Value{}, fmt.Errorf("want a whole number%s, got %v", unitSuffix(k), n)
		}
		return Value{}, fmt.Errorf("want a whole number%s (no quotes), got %s", unitSuffix(k), tomlType(raw))
	case KindUsers:
		list, ok := raw.([]any)
		if !ok {
			if tables, ok := raw.([]map[string]any); ok {
				for _, t := range tables {
					list = append(list, t)
				}
			} else {
				return Value{}, fmt.Errorf(`want a list such as [{name = "alice", password = "..."}] or ["alice:..."], got %s`, tomlType(raw))
			}
		}
		var users []broker.UserSeed
		for i, item := range list {
			u, err := userFromTOML(item)
			if err != nil {
				return Value{}, fmt.Errorf("entry %d: %v", i+1, err)
			}
			users = append(users, u)
		}
		return Users(users...), nil
	}
	panic("config: unknown kind")
}

func userFromTOML(item any) (broker.UserSeed, error) {
	switch u := item.(type) {
	case string:
		return parseUser(u)
	case map[string]any:
		var seed broker.UserSeed
		for field, v := range u {
			s, ok := v.(string)
			switch {
			case !ok:
				return seed, fmt.Errorf("%s must be a string", field)
			case field == "name":
				seed.Name = s
			case field == "password":
				seed.Password = s
			default:
				return seed, fmt.Errorf("unknown field %s; a user has name and password", field)
			}
		}
		if seed.Name == "" || seed.Password == "" {
			return seed, errors.New("a user needs a non-empty name and password")
		}
		return seed, nil
	}
	return broker.UserSeed{}, fmt.Errorf("want {name = \"...\", password = \"...\"} or \"NAME:PASSWORD\", got %s", tomlType(item))
}

func tomlType(raw any) string {
	switch raw.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case map[string]any:
		return "a table"
	case []any, []map[string]any:
		return "an array"
	}
	return fmt.Sprintf("a %T", raw)
}

// lineText is " line N:" for the line that sets key, or "" when a simple
// scan cannot tell (the TOML library keeps key positions to itself). The
// scan follows [table] headers and dotted keys; it is a pointer for the
// operator, not a parser: a miss only drops the line number.
func lineText(data []byte, key string) string {
	clean := func(s string) string {
		parts := strings.Split(s, ".")
		for i, p := range parts {
			parts[i] = strings.Trim(strings.TrimSpace(p), `"'`)
		}
		return strings.Join(parts, ".")
	}
	table := ""
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "["):
			header, _, _ := strings.Cut(strings.Trim(line, "[]"), "]")
			table = clean(strings.Trim(header, "[]"))
		case strings.Contains(line, "=") && !strings.HasPrefix(line, "#"):
			name, _, _ := strings.Cut(line, "=")
			full := clean(name)
			if table != "" {
				full = table + "." + full
			}
			if full == key {
				return fmt.Sprintf(" line %d:", i+1)
			}
		}
	}
	return ""
}
