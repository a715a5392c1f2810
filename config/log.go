package config

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// Logging (log.level, log.format). Invariants:
//   - the handler's level is a *slog.LevelVar, so the level can change while
//     the broker runs (PUT /admin/api/log-level) without a new logger;
//   - level names are the four of log.level's Enum, lower case, both ways.

// ParseLevel reads debug, info, warn or error (any case).
func ParseLevel(text string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(text)) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("unknown log level %q: want debug, info, warn or error", text)
}

// LevelName is the lower-case name of l ("debug", "warn+2" between levels).
func LevelName(l slog.Level) string { return strings.ToLower(l.String()) }

// NewLogger builds the broker's logger on w from log.format and log.level.
// The returned LevelVar sets the level live.
func (c *Config) NewLogger(w io.Writer) (*slog.Logger, *slog.LevelVar) {
	level := new(slog.LevelVar)
	l, err := ParseLevel(c.String("log.level"))
	if err != nil {
		panic("config: log.level passed validation but does not parse: " + err.Error())
	}
	level.Set(l)
	opts := &slog.HandlerOptions{Level: level}
	if c.String("log.format") == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), level
	}
	return slog.New(slog.NewTextHandler(w, opts)), level
}
