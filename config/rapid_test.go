package config

import (
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/fibril-go/fibril/io/broker"
)

// The precedence property: every key of the real table is given a random
// subset of {file, env, flag}, each with its own random valid value (in
// the file as a dotted key or under a [table]); the effective value must be
// the highest source's, its source and origin must name it, and
// Broker() must carry it into broker.Config (Get after Set gives it back).

// genValue draws a valid value for k (valid alone and together with the
// other keys' draws: broker.Config relations hold by construction).
func genValue(t *rapid.T, k *Key, label string) Value {
	switch k.Name {
	case "server.data_dir":
		return Str(rapid.StringMatching(`/?[a-z0-9_.-]{1,12}(/[a-z0-9_-]{1,8}){0,2}`).Draw(t, label))
	case "server.name":
		return Str(rapid.StringMatching(`[a-z][a-z0-9-]{0,15}`).Draw(t, label))
	case "broker.listener.bind":
		return Str("127.0.0.1:" + strconv.Itoa(rapid.IntRange(1, 65535).Draw(t, label)))
	case "admin.listener.bind", "debug.pprof_addr":
		if rapid.Bool().Draw(t, label+"-off") {
			return Str("")
		}
		return Str("127.0.0.1:" + strconv.Itoa(rapid.IntRange(0, 65535).Draw(t, label)))
	case "admin.auth.username", "admin.auth.password":
		return Str(rapid.StringMatching(`[a-zA-Z0-9_.-]{0,12}`).Draw(t, label))
	case "broker.listener.advertise":
		return Str(rapid.StringMatching(`([a-z][a-z0-9-]{0,10}(\.[a-z]{2,5})?)?`).Draw(t, label))
	case "connection.frame_payload_max_bytes":
		// The outbox (below) must hold one largest frame: at most the default.
		return Int(rapid.Int64Range(1024, 1<<20).Draw(t, label))
	case "connection.outbox_max_bytes":
		return Int(rapid.Int64Range(64<<20, 1<<30).Draw(t, label)) // at least the default frame cap
	}
	switch k.Kind {
	case KindString:
		if k.Enum == nil {
			panic("genValue: no generator for string key " + k.Name)
		}
		return Str(rapid.SampledFrom(k.Enum).Draw(t, label))
	case KindBool:
		return Bool(rapid.Bool().Draw(t, label))
	case KindInt:
		hi := min(k.Max, k.Min+1_000_000)
		return Int(rapid.OneOf(rapid.Just(k.Min), rapid.Just(k.Max), rapid.Int64Range(k.Min, hi)).Draw(t, label))
	case KindUsers:
		n := rapid.IntRange(1, 3).Draw(t, label+"-count")
		users := make([]broker.UserSeed, n)
		for i := range users {
			// Distinct names; passwords may hold ':' (only the first splits).
			users[i] = broker.UserSeed{Name: fmt.Sprintf("u%d%s", i, rapid.StringMatching(`[a-z]{0,4}`).Draw(t, label+"-name")),
				Password: rapid.StringMatching(`[a-zA-Z0-9:!]{1,10}`).Draw(t, label+"-password")}
		}
		return Users(users...)
	}
	panic("genValue: unknown kind")
}

// tomlLiteral writes v as TOML (real passwords, unlike valueText).
func tomlLiteral(k *Key, v Value, asStrings bool) string {
	if k.Kind == KindString {
		return strconv.Quote(v.Str) // valueText would redact a secret
	}
	if k.Kind != KindUsers {
		return valueText(k, v)
	}
	parts := make([]string, 0, len(v.Users))
	for _, u := range v.Users {
		if asStrings {
			parts = append(parts, strconv.Quote(u.Name+":"+u.Password))
		} else {
			parts = append(parts, fmt.Sprintf("{name = %s, password = %s}", strconv.Quote(u.Name), strconv.Quote(u.Password)))
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// envText writes v as a variable's value.
func envText(k *Key, v Value) string {
	switch k.Kind {
	case KindBool:
		return strconv.FormatBool(v.Bool)
	case KindInt:
		return strconv.FormatInt(v.Int, 10)
	case KindUsers:
		parts := make([]string, 0, len(v.Users))
		for _, u := range v.Users {
			parts = append(parts, u.Name+":"+u.Password)
		}
		return strings.Join(parts, ",")
	}
	return v.Str
}

// flagArgs writes v as command-line arguments for k's flag.
func flagArgs(t *rapid.T, k *Key, v Value) []string {
	name := "--" + k.Flag
	switch {
	case k.Kind == KindUsers:
		var args []string
		for _, u := range v.Users {
			args = append(args, name, u.Name+":"+u.Password)
		}
		return args
	case k.Kind == KindBool:
		b := v.Bool
		if k.FlagNegates {
			b = !b
		}
		if b && rapid.Bool().Draw(t, k.Name+"-bare") {
			return []string{name}
		}
		return []string{name + "=" + strconv.FormatBool(b)}
	case k.FlagDuration && rapid.Bool().Draw(t, k.Name+"-duration"):
		return []string{name, strconv.FormatInt(v.Int, 10) + "ms"}
	}
	return []string{name + "=" + envText(k, v)}
}

func TestPrecedenceProperty(t *testing.T) {
	const path = "/etc/fibril/fibril.toml"
	rapid.Check(t, func(t *rapid.T) {
		table := Table()
		sections := map[string][]string{} // [section] -> lines under it
		var dotted, environ, args []string
		type want struct {
			value  Value
			source Source
			origin string
		}
		wants := map[string]want{}
		asTable := map[string]bool{}
		for i := range table {
			k := &table[i]
			for _, source := range []Source{SourceFile, SourceEnv, SourceFlag} {
				if source == SourceFlag && k.Flag == "" || !rapid.Bool().Draw(t, k.Name+"-"+source.String()) {
					continue
				}
				v := genValue(t, k, k.Name+"-"+source.String()+"-value")
				switch source {
				case SourceFile:
					literal := tomlLiteral(k, v, rapid.Bool().Draw(t, k.Name+"-strings"))
					// One form per top-level table: TOML refuses a [header]
					// for a table that dotted keys already defined.
					top, _, _ := strings.Cut(k.Name, ".")
					if _, drawn := asTable[top]; !drawn {
						asTable[top] = rapid.Bool().Draw(t, top+"-as-table")
					}
					if asTable[top] {
						dot := strings.LastIndex(k.Name, ".")
						sections[k.Name[:dot]] = append(sections[k.Name[:dot]], k.Name[dot+1:]+" = "+literal)
					} else {
						dotted = append(dotted, k.Name+" = "+literal)
					}
					wants[k.Name] = want{v, SourceFile, path}
				case SourceEnv:
					name := k.EnvName()
					environ = append(environ, name+"="+envText(k, v))
					wants[k.Name] = want{v, SourceEnv, name}
				case SourceFlag:
					args = append(args, flagArgs(t, k, v)...)
					wants[k.Name] = want{v, SourceFlag, "--" + k.Flag}
				}
			}
		}
		// Dotted keys first: TOML puts keys after a [header] under it.
		file := strings.Join(dotted, "\n") + "\n"
		// In sorted order: a failing draw replays to the same file.
		for _, section := range slices.Sorted(maps.Keys(sections)) {
			file += "[" + section + "]\n" + strings.Join(sections[section], "\n") + "\n"
		}
		if rapid.Bool().Draw(t, "config-by-env") {
			environ = append(environ, ConfigEnv+"="+path)
		} else {
			args = append([]string{"--config", path}, args...)
		}
		c, err := Load(table, Inputs{Args: args, Environ: environ, Output: io.Discard,
			ReadFile: func(p string) ([]byte, error) {
				if p != path {
					return nil, os.ErrNotExist
				}
				return []byte(file), nil
			}})
		if err != nil {
			t.Fatalf("Load: %v\nfile:\n%s\nenv: %q\nargs: %q", err, file, environ, args)
		}
		// A key another set key implies (evict_after_ms turns cleanup on) is
		// TestEnvAliasAndImplies's to check: skipped here when the implying
		// source is at least as high as the key's own.
		implied := map[string]bool{}
		for i := range table {
			k := &table[i]
			w, set := wants[k.Name]
			for target := range k.Implies {
				if own, ok := wants[target]; set && (!ok || own.source <= w.source) {
					implied[target] = true
				}
			}
		}
		defaults := broker.DefaultConfig()
		applied := c.Broker(defaults)
		for i := range table {
			k := &table[i]
			if implied[k.Name] {
				continue
			}
			s := c.Get(k.Name)
			w, set := wants[k.Name]
			if !set {
				w = want{value: k.Default, source: SourceDefault}
				if k.Get != nil {
					w.value = k.Get(defaults)
				}
			}
			if !sameValue(s.Value, w.value) || s.Source != w.source || s.Origin != w.origin {
				t.Fatalf("%s = %+v from %s, want %+v from %s %s\nfile:\n%s\nenv: %q\nargs: %q",
					k.Name, s.Value, s.SourceText(), w.value, w.source, w.origin, file, environ, args)
			}
			if k.Get != nil && !sameValue(k.Get(applied), s.Value) {
				t.Fatalf("%s: broker.Config carries %+v, want %+v", k.Name, k.Get(applied), s.Value)
			}
		}
	})
}

// sameValue compares values, an empty user list equal to a nil one.
func sameValue(a, b Value) bool {
	if len(a.Users) == 0 && len(b.Users) == 0 {
		a.Users, b.Users = nil, nil
	}
	return reflect.DeepEqual(a, b)
}

// The validation property: one key of the table, set by a random source to
// a random value out of its range (or outside its enum), is refused, and
// the message names the key, the value and the source that set it.
func TestOutOfRangeIsRefusedNamingTheSourceProperty(t *testing.T) {
	table := Table()
	var candidates []*Key
	for i := range table {
		if table[i].Kind == KindInt || table[i].Enum != nil {
			candidates = append(candidates, &table[i])
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		k := rapid.SampledFrom(candidates).Draw(t, "key")
		var v Value
		switch {
		case k.Kind == KindInt && (k.Min == 0 || rapid.Bool().Draw(t, "above")):
			v = Int(k.Max + rapid.Int64Range(1, 1<<40).Draw(t, "over"))
		case k.Kind == KindInt:
			v = Int(k.Min - rapid.Int64Range(1, 1<<40).Draw(t, "under"))
		default:
			v = Str(rapid.StringMatching(`[a-z]{1,8}`).Filter(func(s string) bool { return !contains(k.Enum, s) }).Draw(t, "word"))
		}
		sources := []Source{SourceFile, SourceEnv}
		if k.Flag != "" {
			sources = append(sources, SourceFlag)
		}
		in := Inputs{Output: io.Discard, ReadFile: func(string) ([]byte, error) {
			return []byte(k.Name + " = " + valueText(k, v) + "\n"), nil
		}}
		var from string
		switch source := rapid.SampledFrom(sources).Draw(t, "source"); source {
		case SourceFile:
			in.Args, from = []string{"--config", "/f.toml"}, "file /f.toml"
		case SourceEnv:
			in.Environ, from = []string{k.EnvName() + "=" + envText(k, v)}, "env "+k.EnvName()
		case SourceFlag:
			in.Args, from = []string{"--" + k.Flag + "=" + envText(k, v)}, "flag --"+k.Flag
		}
		_, err := Load(table, in)
		want := k.Name + " = " + valueText(k, v) + " (from " + from + ")"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Load: %v\nwant an error naming %q", err, want)
		}
	})
}
