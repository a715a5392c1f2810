package ctl

// The admin HTTP API client.
//
// Invariants:
//   - Every request carries basic auth with --username/--password, else the
//     config file's admin.auth.* (the broker ignores it while admin.auth is off) and a JSON body only when
//     there is one.
//   - An answer body is read up to answerBytesMax; a larger one is an error,
//     never a hang or an unbounded buffer.
//   - A non-2xx answer becomes an exitError whose code follows the status
//     (apiExitCode) and whose message is the API's own {code, message}.

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	transportpkg "github.com/fibril-go/fibril/transport"
	"github.com/fibril-go/fibril/transport/certs"
)

// answerBytesMax bounds one API answer (a messages page with payloads is the
// largest).
const answerBytesMax = 64 << 20

// apiProblem is the API's error body.
type apiProblem struct {
	Code    string          `json:"code"`
	Message string          `json:"message"`
	Current json.RawMessage `json:"current,omitempty"`
}

// apiError is a non-2xx answer.
type apiError struct {
	status  int
	problem apiProblem
	method  string
	path    string
}

func (e *apiError) Error() string {
	msg := e.problem.Message
	if msg == "" {
		msg = http.StatusText(e.status)
	}
	s := fmt.Sprintf("%s %s: %d %s: %s", e.method, e.path, e.status, e.problem.Code, msg)
	if len(e.problem.Current) > 0 && string(e.problem.Current) != "null" {
		s += "\ncurrent: " + string(e.problem.Current)
	}
	return s
}

// apiExitCode maps an HTTP status to an exit code.
func apiExitCode(status int) int {
	switch {
	case status == http.StatusUnauthorized:
		return exitAuth
	case status == http.StatusNotFound:
		return exitNotFound
	case status == http.StatusConflict, status == http.StatusForbidden:
		return exitConflict
	case status >= 400 && status < 500:
		return exitUsage
	}
	return exitFailed
}

// httpClient builds the admin HTTP client. For https it trusts --ca-file or
// --pin-sha256; without them, a loopback admin URL also trusts the CA the
// broker at --broker published for local clients (the admin listener serves
// the same material), else the OS roots. Redirects are not followed: a
// redirect (http to https) is reported with the URL to use, since following
// one would turn a POST into a GET.
func (r *run) httpClient() (*http.Client, error) {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	trust := certs.TrustOptions{
		CAFile:       r.g.caFile.value,
		PinnedSHA256: r.g.pin.value,
		ServerName:   r.g.serverName.value,
	}
	conf, err := certs.ClientTLSConfig(trust)
	if u, perr := url.Parse(r.g.admin.value); perr == nil && transportpkg.IsLoopbackHost(u.Hostname()) {
		conf, err = certs.ClientTLSConfigFor(r.g.broker.value, trust)
	}
	if err != nil {
		return nil, fail(exitUsage, "TLS options: %v", err)
	}
	transport.TLSClientConfig = conf
	return &http.Client{
		Transport: transport,
		Timeout:   r.g.timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			return &redirectError{to: req.URL}
		},
	}, nil
}

// redirectError: the admin API answered with a redirect.
type redirectError struct{ to *url.URL }

func (e *redirectError) Error() string {
	return "the admin API redirects to " + e.to.String()
}

// call sends method path (with query) and body (nil for none) to the admin
// API and returns the raw answer. A non-2xx answer is an error.
func (r *run) call(ctx context.Context, method, path string, query url.Values, body any) ([]byte, error) {
	hc, err := r.httpClient()
	if err != nil {
		return nil, err
	}
	target := r.g.admin.value + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, fail(exitFailed, "encode request: %v", err)
		}
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, reader)
	if err != nil {
		return nil, fail(exitUsage, "admin URL: %v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.SetBasicAuth(r.g.adminUsername, r.g.adminPassword)
	resp, err := hc.Do(req)
	if err != nil {
		var re *redirectError
		if errors.As(err, &re) {
			base := *re.to
			base.Path, base.RawQuery = "", ""
			return nil, fail(exitUsage, "%v: pass --admin %s", re, base.String())
		}
		return nil, unreachable(r.g.admin.value, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, answerBytesMax+1))
	if err != nil {
		return nil, fail(exitUnreachable, "reading the answer of %s %s: %v", method, path, err)
	}
	if len(data) > answerBytesMax {
		return nil, fail(exitFailed, "the answer of %s %s is over %d bytes; ask for less (--limit)", method, path, answerBytesMax)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		ae := &apiError{status: resp.StatusCode, method: method, path: path}
		if json.Unmarshal(data, &ae.problem) != nil || ae.problem.Code == "" {
			ae.problem.Message = strings.TrimSpace(string(data))
		}
		if resp.StatusCode == http.StatusUnauthorized {
			ae.problem.Message += " (check --username/--password, or $" + envUsername + "/$" + envPassword + ")"
		}
		code := apiExitCode(resp.StatusCode)
		if missingEndpoint(resp.StatusCode, ae.problem) {
			// Not a missing queue or user: the broker lacks the endpoint.
			code = exitFailed
			ae.problem.Message += " (this broker does not serve this command: it is older than this fibrilctl)"
		}
		return nil, &exitError{code: code, err: ae}
	}
	return data, nil
}

// missingEndpoint tells an answer for a route the broker does not have
// (404 from the catch-all, 405, 501) from a 404 about a named thing.
func missingEndpoint(status int, p apiProblem) bool {
	switch status {
	case http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return true
	case http.StatusNotFound:
		return strings.HasPrefix(p.Message, "no admin endpoint at")
	}
	return false
}

// unreachable wraps a transport failure to the admin listener.
func unreachable(base string, err error) error {
	var netErr net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()) {
		return fail(exitUnreachable, "the admin API at %s did not answer in time (--timeout): %v", base, err)
	}
	var certErr *tls.CertificateVerificationError
	if errors.As(err, &certErr) {
		return fail(exitUnreachable, "the admin API at %s presented a certificate this host does not trust; pass --ca-file or --pin-sha256: %v", base, err)
	}
	return fail(exitUnreachable, "cannot reach the admin API at %s (is the broker running with --admin-listen there? set --admin): %v", base, err)
}

// getJSON GETs path and decodes the answer into v; it returns the raw answer.
func (r *run) getJSON(path string, query url.Values, v any) ([]byte, error) {
	return r.doJSON(http.MethodGet, path, query, nil, v)
}

// doJSON sends a request and decodes the answer into v (when v is not nil).
func (r *run) doJSON(method, path string, query url.Values, body, v any) ([]byte, error) {
	data, err := r.call(r.ctx, method, path, query, body)
	if err != nil {
		return nil, err
	}
	if v != nil && len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, v); err != nil {
			return data, fail(exitFailed, "the answer of %s %s is not the JSON expected: %v", method, path, err)
		}
	}
	return data, nil
}

// printJSON writes raw JSON indented.
func (r *run) printJSON(raw []byte) {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	var buf bytes.Buffer
	if json.Indent(&buf, bytes.TrimSpace(raw), "", "  ") != nil {
		r.env.Stdout.Write(raw)
		return
	}
	buf.WriteByte('\n')
	r.env.Stdout.Write(buf.Bytes())
}

// printValue writes v as indented JSON.
func (r *run) printValue(v any) {
	data, _ := json.MarshalIndent(v, "", "  ")
	r.env.Stdout.Write(append(data, '\n'))
}
