package admin

import (
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
)

// Browsers as attackers. The admin listener is off-auth by default on
// loopback, so any web page a developer opens could otherwise drive it:
// a cross-site POST needs no CORS preflight when it carries no JSON
// Content-Type (a Blob body), and DNS rebinding lets a page on an attacker's
// name read what 127.0.0.1:8081 answers. Invariants:
//   - a state-changing request (anything but GET, HEAD, OPTIONS) that a
//     browser marks as coming from another site (Sec-Fetch-Site
//     cross-site or same-site, or an Origin whose host is not the request's
//     Host) is refused with 403 before any handler runs;
//   - on a loopback listener, a request whose Host names neither a
//     loopback name nor an IP literal is refused (421): a rebound name is
//     the only way a browser sends one there;
//   - request bodies are JSON (readJSON refuses another Content-Type);
//   - scripts and scrapers send none of these headers and pass untouched.

// loopbackOnly is set when the listener is bound to a loopback address.
type originGuard struct{ loopbackOnly atomic.Bool }

// withSameOrigin wraps next with the checks above.
func (s *Server) withSameOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.origin.loopbackOnly.Load() && !loopbackHost(r.Host) {
			writeError(w, http.StatusMisdirectedRequest, "bad_host",
				"this admin listener is bound to loopback and answers only requests for localhost or an IP address; use http://127.0.0.1:PORT")
			return
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			if crossSite(r) {
				writeError(w, http.StatusForbidden, "cross_site",
					"a browser sent this request from another site; the admin API takes state-changing requests only from its own pages or from scripts (curl, fibrilctl)")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// crossSite says whether a browser marked r as coming from another origin.
func crossSite(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return true
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return true // "null" (a sandboxed or file page) or garbage
	}
	return !strings.EqualFold(u.Host, r.Host)
}

// loopbackHost says whether a Host header names this machine by a loopback
// name or by an IP literal (which no DNS rebinding can produce).
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	return net.ParseIP(host) != nil
}

// isLoopbackAddr says whether a listener address is a loopback one.
func isLoopbackAddr(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
