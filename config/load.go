package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fibril-go/fibril/io/broker"
)

// Loading. Invariants:
//   - each source is read into its own layer (key -> value and origin)
//     before any is applied, so precedence is one comparison per key, not
//     an accident of reading order;
//   - a layer holds only values of the key's kind; ranges, enums and
//     checks are applied once, to the winning value, so the error names the
//     source that actually decided it;
//   - every error of one start is reported together (an operator fixes a
//     file in one go), sorted, each on its own line.

// Inputs is what Load reads.
type Inputs struct {
	// Args are the command line after "serve".
	Args []string
	// Environ is the environment as "NAME=value" (os.Environ()).
	Environ []string
	// ReadFile reads the TOML file (os.ReadFile when nil).
	ReadFile func(path string) ([]byte, error)
	// Output receives --help (os.Stderr when nil).
	Output io.Writer
	// Usage, when set, is printed before the flags by --help.
	Usage string
	// ExtraFlags, when set, registers flags that are not keys (yet): a
	// setting added with a temporary flag keeps working until it becomes a
	// row. They are parsed with the rest; their values are the caller's.
	ExtraFlags func(fs *flag.FlagSet)
}

// ErrHelp is returned when --help was asked for (the usage is printed).
var ErrHelp = flag.ErrHelp

// ConfigEnv names the config file when --config is not given.
const ConfigEnv = "FIBRIL_CONFIG"

// Seed pair (SPEC 10): one user from two variables.
const (
	seedUsernameEnv = "FIBRIL_AUTH_USERNAME"
	seedPasswordEnv = "FIBRIL_AUTH_PASSWORD"
	seedUsersKey    = "auth.seed_users"
)

// notConfigEnv are FIBRIL_* variables that are not configuration: the
// tools', tests' and scripts' own. They are never errors.
var notConfigEnv = []string{"FIBRIL_MUTANT", "FIBRIL_STORAGE_BACKEND", "FIBRIL_FUZZ_SECONDS",
	"FIBRIL_WIRE_VECTORS", "FIBRIL_LOGSTORE_MEASURE", "FIBRIL_MEASURE",
	// scripts/bench-compare.sh's knobs (FIBRIL_SHARED: its former
	// location of the reference harness, still exported by old shells).
	"FIBRIL_SHARED", "FIBRIL_SYSTEMS", "FIBRIL_PORT", "FIBRIL_PID", "FIBRIL_CONN",
	// bench/peers' tests: a nats-server binary and a RabbitMQ to use.
	"FIBRIL_NATS_SERVER", "FIBRIL_BENCH_AMQP_URL",
	// fibrilctl's login (SPEC 12): a shell that exports them for the CLI
	// may start the broker too.
	"FIBRIL_USERNAME", "FIBRIL_PASSWORD"}

// notConfigEnvPrefixes are prefixes of such variables.
var notConfigEnvPrefixes = []string{"FIBRIL_E2E_"}

// envSuggestDistanceMax: an unknown FIBRIL_ variable this close to a known
// one (in edits) is taken for a typo of it.
const envSuggestDistanceMax = 2

type assignment struct {
	value  Value
	origin string
}

// layer is one source's values by key name.
type layer map[string]assignment

// Load builds the effective configuration from table and in.
func Load(table []Key, in Inputs) (*Config, error) {
	checkTable(table)
	if in.ReadFile == nil {
		in.ReadFile = os.ReadFile
	}
	if in.Output == nil {
		in.Output = os.Stderr
	}
	byName := make(map[string]*Key, len(table))
	for i := range table {
		byName[table[i].Name] = &table[i]
	}
	cfg := &Config{index: make(map[string]int, len(table))}

	flags, configPath, err := parseFlags(table, in, cfg)
	if err != nil {
		return nil, err
	}
	env, envErrs := readEnv(table, byName, in.Environ, cfg)
	if configPath != "" {
		cfg.File, cfg.FileFrom = configPath, "--config"
	} else if path, ok := lookupEnv(in.Environ, ConfigEnv); ok && path != "" {
		cfg.File, cfg.FileFrom = path, ConfigEnv
	}
	var errs []string
	file := layer{}
	if cfg.File != "" {
		var fileErrs []string
		file, fileErrs = readFile(table, byName, cfg.File, cfg.FileFrom, in.ReadFile)
		errs = append(errs, fileErrs...)
	}
	errs = append(errs, envErrs...)
	if len(errs) > 0 {
		return nil, joinErrors(errs)
	}
	layers := [...]layer{SourceFile: file, SourceEnv: env, SourceFlag: flags}
	for source := SourceFile; source <= SourceFlag; source++ {
		applyImplies(byName, layers[source])
	}
	defaults := broker.DefaultConfig()
	for i := range table {
		k := &table[i]
		s := Setting{Key: k, Value: k.Default, Source: SourceDefault}
		if k.Get != nil {
			s.Value = k.Get(defaults)
		}
		for source := SourceFile; source <= SourceFlag; source++ {
			if a, ok := layers[source][k.Name]; ok {
				s = Setting{Key: k, Value: a.value, Source: source, Origin: a.origin}
			}
		}
		cfg.index[k.Name] = len(cfg.settings)
		cfg.settings = append(cfg.settings, s)
	}
	if err := cfg.validate(defaults); err != nil {
		return nil, err
	}
	return cfg, nil
}

// checkTable asserts the table is well formed: a broken table is a
// programming error caught by any test that loads it.
func checkTable(table []Key) {
	names, flags, envs := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, k := range table {
		if k.Name == "" || names[k.Name] || !strings.Contains(k.Name, ".") {
			panic("config: key name empty, repeated or without a section: " + k.Name)
		}
		names[k.Name] = true
		if (k.Get == nil) != (k.Set == nil) {
			panic("config: key " + k.Name + " needs both Get and Set, or neither")
		}
		if k.Flag != "" {
			if flags[k.Flag] || k.Flag == "config" || k.Flag == "print-config" {
				panic("config: flag used twice: " + k.Flag)
			}
			flags[k.Flag] = true
		}
		if k.FlagNegates && k.Kind != KindBool || k.FlagDuration && k.Kind != KindInt {
			panic("config: key " + k.Name + ": FlagNegates needs a bool, FlagDuration an int")
		}
		for _, e := range append([]string{k.EnvName()}, k.EnvAliases...) {
			if envs[e] {
				panic("config: environment variable used twice: " + e)
			}
			envs[e] = true
		}
	}
}

// flagValue is one row's flag: it parses into the flag layer.
type flagValue struct {
	key   *Key
	layer layer
	def   string
	// secretErrs collects the errors of Secret keys' flags: the flag
	// package would quote the bad value (a password) in its message.
	secretErrs *[]string
}

func (f *flagValue) String() string {
	if f == nil {
		return ""
	}
	return f.def
}

func (f *flagValue) IsBoolFlag() bool { return f.key != nil && f.key.Kind == KindBool }

func (f *flagValue) Set(text string) error {
	k := f.key
	var v Value
	var err error
	switch {
	case k.Kind == KindUsers:
		// Repeatable: each --user adds one.
		var user broker.UserSeed
		if user, err = parseUser(text); err == nil {
			v = Users(append(f.layer[k.Name].value.Users, user)...)
		}
	case k.FlagDuration:
		v, err = parseDurationMs(text)
	default:
		v, err = parseText(k, text)
	}
	if err != nil && k.Secret {
		*f.secretErrs = append(*f.secretErrs, fmt.Sprintf("flag --%s %s: %v", k.Flag, Redacted, err))
		return nil
	}
	if err != nil {
		return err
	}
	if k.FlagNegates {
		v.Bool = !v.Bool
	}
	f.layer[k.Name] = assignment{value: v, origin: "--" + k.Flag}
	return nil
}

// printFlag is --print-config[=json].
type printFlag struct{ cfg *Config }

func (p *printFlag) String() string   { return "" }
func (p *printFlag) IsBoolFlag() bool { return true }
func (p *printFlag) Set(text string) error {
	switch strings.ToLower(text) {
	case "true", "text":
		p.cfg.PrintConfig = "text"
	case "false":
		p.cfg.PrintConfig = ""
	case "json":
		p.cfg.PrintConfig = "json"
	default:
		return errors.New("want --print-config (text) or --print-config=json")
	}
	return nil
}

// parseFlags reads the command line into the flag layer; it returns the
// --config path too.
func parseFlags(table []Key, in Inputs, cfg *Config) (layer, string, error) {
	flags := layer{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(in.Output)
	configPath := fs.String("config", "", "TOML configuration file (else $"+ConfigEnv+"); docs/configuration.md lists every key")
	fs.Var(&printFlag{cfg: cfg}, "print-config", "print the effective configuration, one key per line with its source, and exit (--print-config=json for JSON)")
	defaults := broker.DefaultConfig()
	var secretErrs []string
	for i := range table {
		k := &table[i]
		if k.Flag == "" {
			continue
		}
		def := k.Default
		if k.Get != nil {
			def = k.Get(defaults)
		}
		text, typeName := flagDefault(k, def)
		fs.Var(&flagValue{key: k, layer: flags, def: text, secretErrs: &secretErrs}, k.Flag,
			fmt.Sprintf("%s (key %s, env %s%s)", k.Doc, k.Name, k.EnvName(), typeName))
	}
	if in.ExtraFlags != nil {
		in.ExtraFlags(fs)
	}
	fs.Usage = func() {
		if in.Usage != "" {
			fmt.Fprintln(fs.Output(), in.Usage)
		}
		fs.PrintDefaults()
	}
	if err := fs.Parse(in.Args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, "", ErrHelp
		}
		return nil, "", &Error{Msg: err.Error() + " (fibril serve --help lists the flags)"}
	}
	if len(secretErrs) > 0 {
		return nil, "", joinErrors(secretErrs)
	}
	if fs.NArg() > 0 {
		return nil, "", errorf("unexpected argument %q: fibril serve takes flags only (fibril serve --help lists them)", fs.Arg(0))
	}
	return flags, *configPath, nil
}

// readEnv reads FIBRIL_* variables into the env layer.
func readEnv(table []Key, byName map[string]*Key, environ []string, cfg *Config) (layer, []string) {
	known := map[string]*Key{}
	for i := range table {
		for _, name := range append([]string{table[i].EnvName()}, table[i].EnvAliases...) {
			known[name] = &table[i]
		}
	}
	flagEnv := map[string]*Key{}
	for i := range table {
		if table[i].Flag != "" {
			flagEnv[EnvName(table[i].Flag)] = &table[i]
		}
	}
	sections := map[string]bool{}
	for _, k := range table {
		section, _, _ := strings.Cut(k.Name, ".")
		sections[strings.ToUpper(section)] = true
	}
	env, errs := layer{}, []string(nil)
	var pairUser, pairPassword string
	var pairSeen []string
	for _, kv := range environ {
		name, text, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "FIBRIL_") || name == ConfigEnv {
			continue
		}
		if name == seedUsernameEnv || name == seedPasswordEnv {
			pairSeen = append(pairSeen, name)
			if name == seedUsernameEnv {
				pairUser = text
			} else {
				pairPassword = text
			}
			continue
		}
		k, ok := known[name]
		if !ok {
			if isNotConfigEnv(name) {
				cfg.Ignored = append(cfg.Ignored, name)
				continue
			}
			if fk, ok := flagEnv[name]; ok {
				// FIBRIL_LEASE_MS: a flag's name, not a key's.
				errs = append(errs, fmt.Sprintf("environment: unknown variable %s; the variable of flag --%s is %s (key %s)",
					name, fk.Flag, fk.EnvName(), fk.Name))
				continue
			}
			nearest, distance := nearestEnv(name, known)
			section, _, _ := strings.Cut(strings.TrimPrefix(name, "FIBRIL_"), "_")
			if !sections[section] && distance > envSuggestDistanceMax {
				cfg.Ignored = append(cfg.Ignored, name)
				continue // not ours: another program's variable
			}
			errs = append(errs, fmt.Sprintf("environment: unknown variable %s; did you mean %s (key %s)? Unset it or correct its name (docs/configuration.md lists every variable)",
				name, nearest, known[nearest].Name))
			continue
		}
		v, err := parseText(k, text)
		if err != nil {
			errs = append(errs, fmt.Sprintf("environment: %s=%s (key %s): %v", name, quoteSecret(k, text), k.Name, err))
			continue
		}
		if prev, dup := env[k.Name]; dup {
			errs = append(errs, fmt.Sprintf("environment: %s and %s both set key %s; unset one", prev.origin, name, k.Name))
			continue
		}
		env[k.Name] = assignment{value: v, origin: name}
	}
	if len(pairSeen) > 0 {
		if _, ok := byName[seedUsersKey]; !ok {
			panic("config: the table has no " + seedUsersKey)
		}
		switch {
		case pairUser == "" || pairPassword == "":
			errs = append(errs, fmt.Sprintf("environment: %s and %s seed one user together; set both (non-empty) or neither",
				seedUsernameEnv, seedPasswordEnv))
		default:
			a := env[seedUsersKey]
			a.value = Users(append(a.value.Users, broker.UserSeed{Name: pairUser, Password: pairPassword})...)
			a.origin = strings.TrimPrefix(a.origin+"+", "+") + seedUsernameEnv + "/" + seedPasswordEnv
			env[seedUsersKey] = a
		}
	}
	sort.Strings(errs)
	return env, errs
}

func isNotConfigEnv(name string) bool {
	if slices.Contains(notConfigEnv, name) {
		return true
	}
	for _, p := range notConfigEnvPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

func lookupEnv(environ []string, name string) (string, bool) {
	for _, kv := range environ {
		if n, v, _ := strings.Cut(kv, "="); n == name {
			return v, true
		}
	}
	return "", false
}

// applyImplies adds, within one layer, the values that a set key implies
// unless the layer sets them itself.
func applyImplies(byName map[string]*Key, l layer) {
	names := make([]string, 0, len(l))
	for name := range l {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for target, text := range byName[name].Implies {
			tk, ok := byName[target]
			if !ok {
				panic("config: key " + name + " implies unknown key " + target)
			}
			if _, set := l[target]; set {
				continue
			}
			v, err := parseText(tk, text)
			if err != nil {
				panic("config: key " + name + " implies a bad value for " + target + ": " + err.Error())
			}
			l[target] = assignment{value: v, origin: l[name].origin + " (implied)"}
		}
	}
}

// parseText reads a value of k's kind from an env or flag string.
func parseText(k *Key, text string) (Value, error) {
	switch k.Kind {
	case KindString:
		if k.Enum != nil {
			text = strings.ToLower(strings.TrimSpace(text))
		}
		return Str(text), nil
	case KindBool:
		b, err := strconv.ParseBool(strings.TrimSpace(text))
		if err != nil {
			return Value{}, fmt.Errorf("want true or false")
		}
		return Bool(b), nil
	case KindInt:
		i, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
		if err != nil {
			return Value{}, fmt.Errorf("want a whole number%s", unitSuffix(k))
		}
		return Int(i), nil
	case KindUsers:
		var users []broker.UserSeed
		for _, part := range strings.Split(text, ",") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			u, err := parseUser(part)
			if err != nil {
				return Value{}, err
			}
			users = append(users, u)
		}
		return Users(users...), nil
	}
	panic("config: unknown kind")
}

func unitSuffix(k *Key) string {
	if k.Unit == "" {
		return ""
	}
	return " of " + map[string]string{"ms": "milliseconds", "MiB": "MiB", "bytes": "bytes"}[k.Unit]
}

// parseDurationMs reads a Go duration ("10s", "250ms") or plain
// milliseconds.
func parseDurationMs(text string) (Value, error) {
	text = strings.TrimSpace(text)
	if i, err := strconv.ParseInt(text, 10, 64); err == nil {
		return Int(i), nil
	}
	d, err := time.ParseDuration(text)
	if err != nil {
		return Value{}, fmt.Errorf("want a duration such as 10s or 500ms, or whole milliseconds")
	}
	return Int(d.Milliseconds()), nil
}

// parseUser reads NAME:PASSWORD.
func parseUser(text string) (broker.UserSeed, error) {
	name, password, ok := strings.Cut(strings.TrimSpace(text), ":")
	if !ok || name == "" || password == "" {
		return broker.UserSeed{}, errors.New("want NAME:PASSWORD, both non-empty")
	}
	return broker.UserSeed{Name: name, Password: password}, nil
}

func joinErrors(errs []string) error {
	if len(errs) == 1 {
		return &Error{Msg: errs[0]}
	}
	return &Error{Msg: fmt.Sprintf("%d problems in the configuration:\n  %s", len(errs), strings.Join(errs, "\n  "))}
}

// flagDefault is a flag's default as --help shows it, and the backquoted
// type name flag.PrintDefaults picks up ("" for a bool).
func flagDefault(k *Key, def Value) (text, typeName string) {
	switch {
	case k.Kind == KindBool:
		b := def.Bool
		if k.FlagNegates {
			b = !b
		}
		if b {
			return "true", ""
		}
		return "", ""
	case k.Kind == KindUsers:
		return "", ", each `NAME:PASSWORD`"
	case k.FlagDuration:
		return (time.Duration(def.Int) * time.Millisecond).String(), ", a `duration` such as 10s"
	case k.Kind == KindInt && k.Unit != "":
		return strconv.FormatInt(def.Int, 10), ", in `" + k.Unit + "`"
	case k.Kind == KindInt:
		return strconv.FormatInt(def.Int, 10), ", an `int`"
	}
	return def.Str, ", a `string`"
}
