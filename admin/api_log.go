package admin

import (
	"log/slog"
	"net/http"

	"github.com/fibril-go/fibril/config"
)

// The log level and the startup configuration (SPEC 11 startup-config,
// SPEC 14). Invariants:
//   - the level is the broker logger's own *slog.LevelVar: a PUT changes
//     what the running broker logs at once, and nothing else;
//   - a level change is audited (action log.level) and logged, whether it
//     was accepted or refused;
//   - the startup configuration is what the broker started with, secrets
//     already redacted by package config; it never changes while running;
//   - neither needs the broker attached: both answer while it recovers.

// logControl is what SetLogControl hands the listener.
type logControl struct {
	level   *slog.LevelVar
	startup []config.PrintedValue
}

// SetLogControl hands the listener the broker logger's level and the
// effective startup configuration (config.Config.Values()).
func (s *Server) SetLogControl(level *slog.LevelVar, startup []config.PrintedValue) {
	if level == nil {
		panic("admin: SetLogControl needs a level")
	}
	s.logControl.Store(&logControl{level: level, startup: startup})
}

// logLevelBody is the body of GET and PUT /admin/api/log-level.
type logLevelBody struct {
	Level string `json:"level"`
}

func (s *Server) logControlOrProblem() (*logControl, error) {
	lc := s.logControl.Load()
	if lc == nil {
		return nil, problem(http.StatusNotImplemented, "not_implemented",
			"this admin listener was started without a log level to control")
	}
	return lc, nil
}

func init() {
	routeFamilies = append(routeFamilies, func(s *Server, mux *http.ServeMux) {
		mux.HandleFunc("GET /admin/api/log-level", s.api(func(w http.ResponseWriter, r *http.Request) error {
			lc, err := s.logControlOrProblem()
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, logLevelBody{Level: config.LevelName(lc.level.Level())})
			return nil
		}))
		mux.HandleFunc("PUT /admin/api/log-level", s.api(func(w http.ResponseWriter, r *http.Request) (err error) {
			var body logLevelBody
			detail := ""
			defer func() { s.audit(r, "log.level", "log.level", err, detail) }()
			lc, err := s.logControlOrProblem()
			if err != nil {
				return err
			}
			if err := readJSON(w, r, &body); err != nil {
				return err
			}
			level, perr := config.ParseLevel(body.Level)
			if perr != nil {
				detail = body.Level
				return problem(http.StatusBadRequest, "bad_parameter",
					"level %q is not a log level; send {\"level\":\"debug\"}, \"info\", \"warn\" or \"error\"", body.Level)
			}
			previous := lc.level.Level()
			detail = config.LevelName(previous) + " -> " + config.LevelName(level)
			lc.level.Set(level)
			// Warn, so the change shows at every level but error.
			s.log.Warn("log level changed through the admin API", "from", config.LevelName(previous),
				"to", config.LevelName(level), "by", actorFunc(r))
			writeJSON(w, http.StatusOK, logLevelBody{Level: config.LevelName(level)})
			return nil
		}))
		mux.HandleFunc("GET /admin/api/startup-config", s.api(func(w http.ResponseWriter, r *http.Request) error {
			lc, err := s.logControlOrProblem()
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, map[string]any{"values": lc.startup})
			return nil
		}))
	})
}
