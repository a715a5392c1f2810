package admin

// Admin auth (SPEC 11, admin.auth). Invariants:
//   - when enabled, every request but /healthz, /readyz, /login and /logout
//     carries valid credentials: basic auth (scrapers, scripts) or a session
//     cookie from POST /login (people); else 401 JSON, nothing served;
//   - credentials are compared in constant time over fixed-length digests,
//     so neither the password nor its length shows in the timing;
//   - session tokens are 256 random bits, kept only in memory, at most
//     adminSessionsMax of them, each for adminSessionTTL: a restart logs
//     everyone out;
//   - the cookie is HttpOnly and SameSite=Strict (and Secure over HTTPS):
//     no script reads it and no other site's form can ride it.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/fibril-go/fibril/dashboard"
)

const (
	// adminSessionCookie names the login session cookie.
	adminSessionCookie = "fibril_admin_session"
	// adminSessionTTL is how long a login lasts.
	adminSessionTTL = 12 * time.Hour
	// adminSessionsMax bounds the logins held; past it the oldest goes.
	adminSessionsMax = 1024
	// loginBodyBytesMax bounds a login form or JSON body.
	loginBodyBytesMax = 8 << 10
)

type adminSession struct {
	user      string
	expiresAt time.Time
	createdAt time.Time
}

type authState struct {
	mu       sync.Mutex
	sessions map[string]adminSession
}

func (a *authState) init() { a.sessions = map[string]adminSession{} }

// open mints a session for user.
func (a *authState) open(user string, now time.Time) string {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		panic("admin: no randomness for a session token: " + err.Error())
	}
	token := hex.EncodeToString(raw[:])
	a.mu.Lock()
	defer a.mu.Unlock()
	for tok, s := range a.sessions {
		if now.After(s.expiresAt) {
			delete(a.sessions, tok)
		}
	}
	for len(a.sessions) >= adminSessionsMax {
		oldest, at := "", now
		for tok, s := range a.sessions {
			if s.createdAt.Before(at) || oldest == "" {
				oldest, at = tok, s.createdAt
			}
		}
		delete(a.sessions, oldest)
	}
	a.sessions[token] = adminSession{user: user, expiresAt: now.Add(adminSessionTTL), createdAt: now}
	return token
}

func (a *authState) lookup(token string, now time.Time) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.sessions[token]
	if !ok {
		return "", false
	}
	if now.After(s.expiresAt) {
		delete(a.sessions, token)
		return "", false
	}
	return s.user, true
}

func (a *authState) close(token string) {
	a.mu.Lock()
	delete(a.sessions, token)
	a.mu.Unlock()
}

// equalSecret compares in constant time, whatever the lengths.
func equalSecret(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// checkPassword says whether (user, password) are the admin's.
func (s *Server) checkPassword(user, password string) bool {
	o := s.surf.opts.Auth
	// Both compared every time: no early exit tells a prober the name.
	u, p := equalSecret(user, o.Username), equalSecret(password, o.Password)
	return u && p
}

type userKey struct{}

// authUser is the admin user a request was authenticated as ("" when auth
// is off).
func authUser(r *http.Request) string {
	u, _ := r.Context().Value(userKey{}).(string)
	return u
}

func init() {
	// The audit names the authenticated user, else the peer.
	actorFunc = func(r *http.Request) string {
		if u := authUser(r); u != "" {
			return u
		}
		return r.RemoteAddr
	}
}

// openPath: served without credentials. The dashboard's static assets
// are open too (the login page needs its script and styles; they are the
// same files for everyone and hold no data).
func openPath(path string) bool {
	switch path {
	case "/healthz", "/readyz", "/login", "/logout":
		return true
	}
	return strings.HasPrefix(path, "/static/")
}

// withAuth wraps the mux with the credential check (a no-op when off).
func (s *Server) withAuth(next http.Handler) http.Handler {
	if !s.surf.opts.Auth.Enabled {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if openPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		if wait := s.failures.blocked(peerOf(r), time.Now()); wait > 0 {
			tooMany(w, wait) // ratelimit.go
			return
		}
		user, ok := s.authenticate(r)
		if !ok {
			if _, _, basic := r.BasicAuth(); basic {
				s.failures.failed(peerOf(r), time.Now())
			} else if dashboard.WantsHTML(r) {
				// A person opening a page: to the login page, then back.
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			w.Header().Set("WWW-Authenticate", `Basic realm="fibril admin", charset="UTF-8"`)
			writeProblem(w, problem(http.StatusUnauthorized, "unauthorized",
				"admin auth is on: send basic auth (Authorization: Basic) or log in with POST /login"))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, user)))
	})
}

func (s *Server) authenticate(r *http.Request) (string, bool) {
	if user, password, ok := r.BasicAuth(); ok {
		return user, s.checkPassword(user, password)
	}
	if c, err := r.Cookie(adminSessionCookie); err == nil && c.Value != "" {
		return s.surf.auth.lookup(c.Value, time.Now())
	}
	return "", false
}

type loginBody struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// readLogin takes a login as JSON or as a form.
func readLogin(w http.ResponseWriter, r *http.Request) (loginBody, error) {
	var in loginBody
	ct := r.Header.Get("Content-Type")
	if strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
		r.Body = http.MaxBytesReader(w, r.Body, loginBodyBytesMax)
		if err := r.ParseForm(); err != nil {
			return in, problem(http.StatusBadRequest, "bad_form", "the login form does not parse: %v", err)
		}
		in.Username, in.Password = r.PostForm.Get("username"), r.PostForm.Get("password")
	} else {
		if err := readJSON(w, r, &in); err != nil {
			return in, err
		}
	}
	if in.Username == "" || in.Password == "" {
		return in, problem(http.StatusBadRequest, "bad_parameter", "send username and password")
	}
	return in, nil
}

func init() {
	routeFamilies = append(routeFamilies, func(s *Server, mux *http.ServeMux) {
		mux.HandleFunc("POST /login", s.api(func(w http.ResponseWriter, r *http.Request) error {
			if !s.surf.opts.Auth.Enabled {
				return problem(http.StatusConflict, "conflict", "admin auth is off: nothing to log in to (start the broker with --admin-auth)")
			}
			if wait := s.failures.blocked(peerOf(r), time.Now()); wait > 0 {
				tooMany(w, wait) // ratelimit.go
				return nil
			}
			in, err := readLogin(w, r)
			if err != nil {
				return err
			}
			if !s.checkPassword(in.Username, in.Password) {
				s.failures.failed(peerOf(r), time.Now())
				// Not audited: anyone who reaches the listener could flush
				// the bounded audit ring with failed logins.
				return problem(http.StatusUnauthorized, "unauthorized", "wrong username or password")
			}
			token := s.surf.auth.open(in.Username, time.Now())
			http.SetCookie(w, &http.Cookie{Name: adminSessionCookie, Value: token, Path: "/", HttpOnly: true,
				SameSite: http.SameSiteStrictMode, Secure: s.surf.opts.ServeTLS, MaxAge: int(adminSessionTTL.Seconds())})
			s.audit(r.WithContext(context.WithValue(r.Context(), userKey{}, in.Username)), "admin.login", in.Username, nil, "")
			writeJSON(w, http.StatusOK, map[string]any{"user": in.Username, "expires_in_s": int(adminSessionTTL.Seconds())})
			return nil
		}))
		mux.HandleFunc("POST /logout", s.api(func(w http.ResponseWriter, r *http.Request) error {
			_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, loginBodyBytesMax))
			if c, err := r.Cookie(adminSessionCookie); err == nil {
				s.surf.auth.close(c.Value)
			}
			http.SetCookie(w, &http.Cookie{Name: adminSessionCookie, Value: "", Path: "/", HttpOnly: true,
				SameSite: http.SameSiteStrictMode, Secure: s.surf.opts.ServeTLS, MaxAge: -1})
			writeJSON(w, http.StatusOK, map[string]bool{"logged_out": true})
			return nil
		}))
	})
}
