package ctl

// A tiny reader of the few broker config keys fibrilctl needs.
//
// The broker's full TOML reader lives in config/; fibrilctl keeps its own so
// that it depends on nothing the broker may change, and reads only keys of
// the broker's own table (config/table.go), so one file serves both
// `fibril serve --config` (which refuses unknown keys) and fibrilctl:
//
//	server.data_dir
//	broker.listener.bind, broker.listener.advertise (a host: the port is bind's)
//	admin.listener.bind
//	admin.auth.username, admin.auth.password (the admin API's basic auth only)
//	tls.enabled, tls.admin_enabled
//
// Invariants:
//   - Only those keys are interpreted; any other key is skipped, whatever its
//     value (arrays and inline tables over several lines included), so a
//     whole broker config file can be given.
//   - A wanted key with a value of the wrong type is an error naming the
//     file, the line and the key.
//   - The file is at most configBytesMax.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

const configBytesMax = 1 << 20

func readConfigFile(path string) (fileConfig, error) {
	info, err := os.Stat(path)
	if err != nil {
		return fileConfig{}, fmt.Errorf("config file: %w", err)
	}
	if info.Size() > configBytesMax {
		return fileConfig{}, fmt.Errorf("config file %s is over %d bytes", path, configBytesMax)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fileConfig{}, fmt.Errorf("config file: %w", err)
	}
	cfg, err := parseConfig(string(data))
	if err != nil {
		return fileConfig{}, fmt.Errorf("config file %s: %w", path, err)
	}
	return cfg, nil
}

// parseConfig reads the wanted keys of a TOML document.
func parseConfig(text string) (fileConfig, error) {
	var cfg fileConfig
	table := ""
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		lineNo := i + 1
		line := strings.TrimSpace(stripComment(lines[i]))
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "[[") {
			table = "" // an array of tables: none of ours
			continue
		}
		if strings.HasPrefix(line, "[") {
			end := strings.Index(line, "]")
			if end < 0 {
				return cfg, fmt.Errorf("line %d: table header %q lacks its ]", lineNo, line)
			}
			table = normalizeKey(line[1:end])
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			return cfg, fmt.Errorf("line %d: want key = value, got %q", lineNo, line)
		}
		full := normalizeKey(key)
		if table != "" {
			full = table + "." + full
		}
		value = strings.TrimSpace(value)
		// A value that opens a bracket or a multi-line string may go on over
		// the next lines: skip those lines unless the key is ours (none is).
		i = skipContinuation(lines, i, value)
		if err := cfg.set(full, value); err != nil {
			return cfg, fmt.Errorf("line %d: %s: %w", lineNo, full, err)
		}
	}
	return cfg, nil
}

// normalizeKey trims a dotted key and unquotes its parts.
func normalizeKey(key string) string {
	parts := strings.Split(strings.TrimSpace(key), ".")
	for i, p := range parts {
		parts[i] = strings.Trim(strings.TrimSpace(p), `"'`)
	}
	return strings.Join(parts, ".")
}

// stripComment cuts a # comment that is not inside a string.
func stripComment(line string) string {
	var quote byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0:
			if c == '\\' && quote == '"' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '#':
			return line[:i]
		}
	}
	return line
}

// skipContinuation returns the index of the last line of a value starting on
// lines[i]: past the closing bracket of an array or inline table, or the
// closing delimiter of a multi-line string.
func skipContinuation(lines []string, i int, value string) int {
	for _, delim := range []string{`"""`, `'''`} {
		if strings.HasPrefix(value, delim) {
			if strings.Count(value, delim) >= 2 {
				return i
			}
			for j := i + 1; j < len(lines); j++ {
				if strings.Contains(lines[j], delim) {
					return j
				}
			}
			return len(lines) - 1
		}
	}
	depth := bracketDepth(value)
	for depth > 0 && i+1 < len(lines) {
		i++
		depth += bracketDepth(stripComment(lines[i]))
	}
	return i
}

func bracketDepth(s string) int {
	depth := 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == '\\' && quote == '"' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			depth--
		}
	}
	return depth
}

// configKeys are the keys read, each a key of the broker's table
// (TestConfigKeysAreTheBrokers checks it against config.Table()).
var configKeys = []string{
	"server.data_dir",
	"broker.listener.bind", "broker.listener.advertise",
	"admin.listener.bind",
	"admin.auth.username", "admin.auth.password",
	"tls.enabled", "tls.admin_enabled",
}

// set reads key's value when it is one of configKeys; any other key is
// skipped.
func (cfg *fileConfig) set(key, value string) error {
	str := func(dst *string) error {
		s, err := tomlString(value)
		if err != nil {
			return err
		}
		*dst = s
		return nil
	}
	boolean := func(dst *bool) error {
		b, err := strconv.ParseBool(value)
		if err != nil || (value != "true" && value != "false") {
			return fmt.Errorf("want true or false, got %s", value)
		}
		*dst = b
		return nil
	}
	switch key {
	case "server.data_dir":
		return str(&cfg.dataDir)
	case "broker.listener.bind":
		return str(&cfg.brokerBind)
	case "broker.listener.advertise":
		return str(&cfg.brokerAdvertise)
	case "admin.listener.bind":
		return str(&cfg.adminBind)
	case "admin.auth.username":
		return str(&cfg.adminUsername)
	case "admin.auth.password":
		return str(&cfg.adminPassword)
	case "tls.enabled":
		return boolean(&cfg.tlsEnabled)
	case "tls.admin_enabled":
		var b bool
		if err := boolean(&b); err != nil {
			return err
		}
		cfg.tlsAdminEnabled = &b
	}
	return nil
}

// tomlString reads a basic ("...") or literal ('...') TOML string.
func tomlString(value string) (string, error) {
	if len(value) >= 2 && value[0] == '\'' && value[len(value)-1] == '\'' {
		return value[1 : len(value)-1], nil
	}
	if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
		s, err := strconv.Unquote(value)
		if err != nil {
			return "", fmt.Errorf("bad string %s: %v", value, err)
		}
		return s, nil
	}
	return "", fmt.Errorf("want a quoted string, got %s", value)
}
