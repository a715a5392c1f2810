package bench

// The result line: ordered key=value pairs, formatted exactly as the harness
// formats them, so that one awk script reads the peers' lines and ours.
//
// Invariants:
//   - Keys keep the order of their first Set; a later Set replaces the value.
//   - Floats: NaN/Inf print as NaN, |x| >= 1000 with no decimals, otherwise
//     three decimals. Strings are quoted when empty or holding a space, tab,
//     quote or '='. Everything else prints with fmt.Sprint.

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Line is one result line.
type Line struct {
	keys   []string
	values map[string]string
}

// NewLine returns an empty line.
func NewLine() *Line { return &Line{values: map[string]string{}} }

// Set sets key to v.
func (l *Line) Set(key string, v any) {
	var s string
	switch x := v.(type) {
	case float64:
		switch {
		case math.IsNaN(x) || math.IsInf(x, 0):
			s = "NaN"
		case math.Abs(x) >= 1000:
			s = strconv.FormatFloat(x, 'f', 0, 64)
		default:
			s = strconv.FormatFloat(x, 'f', 3, 64)
		}
	case string:
		s = x
		if s == "" || strings.ContainsAny(s, " \t\"=") {
			s = strconv.Quote(s)
		}
	default:
		s = fmt.Sprint(x)
	}
	if _, ok := l.values[key]; !ok {
		l.keys = append(l.keys, key)
	}
	l.values[key] = s
}

// Get returns the formatted value of key and whether it is set.
func (l *Line) Get(key string) (string, bool) {
	v, ok := l.values[key]
	return v, ok
}

// moveToEnd puts key last (a figure of our own after the harness's keys,
// whatever order it was set in); nothing when unset.
func (l *Line) moveToEnd(key string) {
	if _, ok := l.values[key]; !ok {
		return
	}
	for i, k := range l.keys {
		if k == key {
			l.keys = append(append(l.keys[:i:i], l.keys[i+1:]...), key)
			return
		}
	}
}

// String renders "k1=v1 k2=v2 ...".
func (l *Line) String() string {
	var b strings.Builder
	for i, k := range l.keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(l.values[k])
	}
	return b.String()
}

// ParseLine splits a result line into its fields (quoted values unquoted), for
// tests and scripts that read lines back.
func ParseLine(s string) (map[string]string, error) {
	fields := map[string]string{}
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimLeft(s, " ") {
		eq := strings.IndexByte(s, '=')
		if eq <= 0 {
			return nil, fmt.Errorf("bench: no key=value at %q", s)
		}
		key, rest := s[:eq], s[eq+1:]
		var value string
		if strings.HasPrefix(rest, `"`) {
			quoted, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return nil, fmt.Errorf("bench: value of %s: %w", key, err)
			}
			value, _ = strconv.Unquote(quoted)
			rest = rest[len(quoted):]
		} else {
			end := strings.IndexByte(rest, ' ')
			if end < 0 {
				end = len(rest)
			}
			value, rest = rest[:end], rest[end:]
		}
		fields[key] = value
		s = rest
	}
	return fields, nil
}
