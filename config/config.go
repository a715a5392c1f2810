// Package config builds the effective configuration of `fibril serve`
// (SPEC 14): embedded defaults < a TOML file (--config PATH, else
// FIBRIL_CONFIG) < FIBRIL_* environment variables < command-line flags.
//
// Invariants:
//   - the key table (Table) is the one place a setting is declared: its key,
//     kind, default, environment name, flag, checks and where it lands in
//     broker.Config; adding a setting is adding one row;
//   - every effective value remembers its source (default|file|env|flag)
//     and where within it (the file, the variable, the flag);
//   - nothing is silently ignored: an unknown TOML key, an unknown
//     FIBRIL_* variable that looks like one of ours, a value of the wrong
//     type or out of range is an error that names the key, where the bad
//     value came from and what to change;
//   - defaults of settings that live in broker.Config are read from
//     broker.DefaultConfig, so the two never drift apart;
//   - secrets (passwords) never leave this package in clear text through
//     Print, PrintJSON or Values.
package config

import (
	"fmt"
	"strings"

	"github.com/fibril-go/fibril/io/broker"
)

// Kind is the type of a key's value.
type Kind uint8

const (
	// KindString is a string (possibly restricted to Enum).
	KindString Kind = iota
	// KindBool is true or false.
	KindBool
	// KindInt is a 64-bit integer within [Min, Max].
	KindInt
	// KindUsers is a list of NAME:PASSWORD seed users.
	KindUsers
)

// Source is where an effective value came from, lowest precedence first.
type Source uint8

const (
	SourceDefault Source = iota
	SourceFile
	SourceEnv
	SourceFlag
)

func (s Source) String() string {
	switch s {
	case SourceDefault:
		return "default"
	case SourceFile:
		return "file"
	case SourceEnv:
		return "env"
	case SourceFlag:
		return "flag"
	}
	return fmt.Sprintf("source(%d)", uint8(s))
}

// Value is one key's value; the field in use is the key's Kind.
type Value struct {
	Str   string
	Bool  bool
	Int   int64
	Users []broker.UserSeed
}

// Str, Bool and Int build Values (for table rows and tests).
func Str(s string) Value { return Value{Str: s} }
func Bool(b bool) Value  { return Value{Bool: b} }
func Int(i int64) Value  { return Value{Int: i} }
func Users(u ...broker.UserSeed) Value {
	return Value{Users: append([]broker.UserSeed(nil), u...)}
}

// Key is one row of the table: everything about one setting.
type Key struct {
	// Name is the dotted TOML key, e.g. "delivery.inflight_ttl_ms".
	Name string
	Kind Kind
	// Doc is one line for --help and docs/configuration.md.
	Doc string
	// Default is the value when no source sets it, for keys that have no
	// Get (keys outside broker.Config).
	Default Value
	// Get reads the key from a broker.Config (its default comes from
	// broker.DefaultConfig); Set writes it. Both nil for keys that
	// `fibril serve` uses itself (listeners, logging).
	Get func(c broker.Config) Value
	Set func(c *broker.Config, v Value)

	// Flag is the command-line flag, without dashes ("" for none). A
	// KindBool flag with FlagNegates sets the key to the flag's opposite
	// (--no-quic sets broker.listener.quic=false). FlagDuration makes the
	// flag of a millisecond key take a Go duration ("10s") or plain
	// milliseconds, as the flag did before keys existed.
	Flag         string
	FlagNegates  bool
	FlagDuration bool
	// EnvAliases are further variable names for this key (SPEC names such
	// as FIBRIL_QUEUE_IDLE_EVICT_AFTER_MS). The regular name EnvName() is
	// always accepted too.
	EnvAliases []string
	// Implies, when this key is set by a file, env or flag, sets each named
	// key to the given text at the same source unless that source sets it
	// itself (SPEC 9: setting the eviction window enables cleanup).
	Implies map[string]string

	// Min and Max bound a KindInt value (inclusive).
	Min, Max int64
	// Unit names a KindInt's unit in messages ("ms", "MiB", "bytes").
	Unit string
	// Enum lists the allowed KindString values (lower case); nil allows any.
	Enum []string
	// Check is a further check of a value; its error says what is wrong
	// and what to write instead.
	Check func(v Value) error
	// Secret values print as <redacted>.
	Secret bool
}

// EnvName is the key's environment variable: FIBRIL_ + the key upper-cased
// with dots and dashes as underscores.
func (k *Key) EnvName() string {
	return EnvName(k.Name)
}

// EnvName turns a dotted key into its FIBRIL_ variable name.
func EnvName(key string) string {
	r := strings.NewReplacer(".", "_", "-", "_")
	return "FIBRIL_" + strings.ToUpper(r.Replace(key))
}

// Setting is one effective value and where it came from.
type Setting struct {
	Key    *Key
	Value  Value
	Source Source
	// Origin is the file path, variable name or flag ("--lease-ms") the
	// value came from; "" for a default.
	Origin string
}

// SourceText is the source with its origin, as printed: "default",
// "file /etc/fibril.toml", "env FIBRIL_LOG_LEVEL", "flag --log-level".
func (s Setting) SourceText() string {
	if s.Origin == "" {
		return s.Source.String()
	}
	return s.Source.String() + " " + s.Origin
}

// Config is the effective configuration.
type Config struct {
	settings []Setting // in table order
	index    map[string]int
	// File is the TOML file read ("" for none) and FileFrom how it was named
	// ("--config" or "FIBRIL_CONFIG").
	File, FileFrom string
	// PrintConfig is "", "text" or "json": --print-config was given.
	PrintConfig string
	// Ignored lists FIBRIL_* variables that are not configuration (tools'
	// and tests' own), for a debug log line.
	Ignored []string
}

// Settings returns every effective value in table order.
func (c *Config) Settings() []Setting { return c.settings }

// Get returns the effective setting of key; it panics on a key that is not
// in the table (a programming error, not an operator's).
func (c *Config) Get(key string) Setting {
	i, ok := c.index[key]
	if !ok {
		panic("config: no key " + key + " in the table")
	}
	return c.settings[i]
}

// String, Bool and Int read one effective value by key.
func (c *Config) String(key string) string { return c.Get(key).Value.Str }
func (c *Config) Bool(key string) bool     { return c.Get(key).Value.Bool }
func (c *Config) Int(key string) int64     { return c.Get(key).Value.Int }

// Broker returns base with every broker.Config key of the table applied.
// base is normally broker.DefaultConfig().
func (c *Config) Broker(base broker.Config) broker.Config {
	for _, s := range c.settings {
		if s.Key.Set != nil {
			s.Key.Set(&base, s.Value)
		}
	}
	return base
}

// Error is a configuration the broker refuses: Error() says what to change
// and where the bad value came from.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func errorf(format string, args ...any) error { return &Error{Msg: fmt.Sprintf(format, args...)} }
