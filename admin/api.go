package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// The JSON API under /admin/api/ (SPEC 11). Invariants:
//   - every answer is JSON; every error is a Problem {code, message[,
//     current]}, the message saying what to do, never a Go error string
//     alone;
//   - a request body is read through readJSON only: at most
//     requestBytesMax, one JSON value, unknown fields refused, so a typo in
//     a field name is an error rather than a silently ignored setting;
//   - endpoint families register themselves (routeFamilies) from their own
//     files, so adding one touches no other family's code;
//   - a family finds what it needs of the broker through its own small
//     interface on the attached Source (backend); a broker that lacks it
//     answers 501, a broker still recovering 503.

// requestBytesMax bounds one request body.
const requestBytesMax = 1 << 20

// routeFamilies are the endpoint families; each registers its routes on
// the mux. Appended to by the families' init functions.
var routeFamilies []func(s *Server, mux *http.ServeMux)

// Problem is an error answer.
type Problem struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// Current is the value in force, for a 409 on a stale version.
	Current any `json:"current,omitempty"`
}

func (p *Problem) Error() string { return p.Code + ": " + p.Message }

// problem builds a Problem.
func problem(status int, code, format string, args ...any) *Problem {
	return &Problem{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// apiFunc is one endpoint: it writes its answer with writeJSON, or returns
// the error to answer with (a *Problem, or anything else as a 500).
type apiFunc func(w http.ResponseWriter, r *http.Request) error

// api adapts an apiFunc to http.HandlerFunc.
func (s *Server) api(h apiFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if err == nil {
			return
		}
		var p *Problem
		if !errors.As(err, &p) {
			s.log.Error("admin api", "method", r.Method, "path", r.URL.Path, "err", err)
			p = problem(http.StatusInternalServerError, "internal",
				"the broker failed to answer: %v; see the broker's log", err)
		}
		writeProblem(w, p)
	}
}

func writeProblem(w http.ResponseWriter, p *Problem) {
	writeJSON(w, p.Status, p)
}

// writeJSON writes v as the JSON answer with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// readJSON decodes the request body into v: one JSON object of at most
// requestBytesMax bytes with no unknown fields.
func readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	// No Content-Type is taken as JSON (curl -d without -H); a cross-site
	// browser request, which needs none for a typeless body, is refused
	// before it gets here (origin.go).
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return problem(http.StatusUnsupportedMediaType, "unsupported_media_type",
			"send the body as JSON with Content-Type: application/json (got %q)", ct)
	}
	body := http.MaxBytesReader(w, r.Body, requestBytesMax)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			return problem(http.StatusRequestEntityTooLarge, "body_too_large",
				"the request body is over %d bytes; send less per request", requestBytesMax)
		case errors.Is(err, io.EOF):
			return problem(http.StatusBadRequest, "bad_json", "the request has no body; send a JSON object")
		default:
			return problem(http.StatusBadRequest, "bad_json", "the body is not the JSON this endpoint takes: %v", err)
		}
	}
	if dec.More() {
		return problem(http.StatusBadRequest, "bad_json", "the body holds more than one JSON value; send one object")
	}
	return nil
}

// backend finds the part of the broker a family needs: 503 while the
// broker recovers, 501 when the attached broker lacks it.
func backend[T any](s *Server) (T, error) {
	var zero T
	src := s.attached()
	if src == nil {
		return zero, problem(http.StatusServiceUnavailable, "starting",
			"the broker is recovering its logs; retry shortly")
	}
	b, ok := src.(T)
	if !ok {
		return zero, problem(http.StatusNotImplemented, "not_implemented",
			"this broker does not serve this endpoint")
	}
	return b, nil
}

// queryUint reads an optional unsigned query parameter (def when absent).
func queryUint(r *http.Request, name string, def, max uint64) (uint64, error) {
	text := r.URL.Query().Get(name)
	if text == "" {
		return def, nil
	}
	v, err := strconv.ParseUint(text, 10, 64)
	if err != nil {
		return 0, problem(http.StatusBadRequest, "bad_parameter", "%s=%q is not a non-negative integer", name, text)
	}
	if v > max {
		return 0, problem(http.StatusBadRequest, "bad_parameter", "%s=%d is over its cap %d", name, v, max)
	}
	return v, nil
}

// queryBool reads an optional boolean query parameter (def when absent).
func queryBool(r *http.Request, name string, def bool) (bool, error) {
	text := r.URL.Query().Get(name)
	if text == "" {
		return def, nil
	}
	v, err := strconv.ParseBool(text)
	if err != nil {
		return false, problem(http.StatusBadRequest, "bad_parameter", "%s=%q: want true or false", name, text)
	}
	return v, nil
}
