package admin

// Connections, subscriptions, force-close, users and TLS (issue 12).
// Invariants:
//   - listings come from the broker's observations (connectionsBackend);
//     a force-close is the Session machine's decision, asked through it;
//   - every mutation is audited, refused or not; a user's password never
//     reaches the audit, a listing or a log;
//   - a TLS reload swaps the material only once it validated; on a
//     refusal the old certificate keeps serving and the answer says why.

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/io/broker"
	"github.com/fibril-go/fibril/transport/certs"
)

// listTimeout bounds a listing that asks every session.
const listTimeout = 10 * time.Second

// forceCloseMessage is what a force-closed client is told.
const forceCloseMessage = "connection closed by an operator"

type connectionsBackend interface {
	Connections(ctx context.Context) ([]broker.ConnectionInfo, error)
	Subscriptions(ctx context.Context) ([]broker.SubscriptionInfo, error)
	CloseConnection(ctx context.Context, connID, sessionID uint64, message string) (*node.SessionClosed, error)
}

type usersBackend interface {
	Users() []string
	PutUser(name, password string) (bool, error)
	DeleteUser(name string) error
}

type closeBody struct {
	ID      uint64 `json:"id"`
	Session uint64 `json:"session"`
}

type userBody struct {
	Name     string `json:"name"`
	Password string `json:"password"`
}

// TLSInfo is GET /admin/api/tls.
type TLSInfo struct {
	FingerprintSHA256   string   `json:"fingerprint_sha256"`
	Subject             string   `json:"subject"`
	SANs                []string `json:"sans"`
	NotBefore           string   `json:"not_before"`
	NotAfter            string   `json:"not_after"`
	CAFingerprintSHA256 string   `json:"ca_fingerprint_sha256"`
	AdminHTTPS          bool     `json:"admin_https"`
}

func tlsInfo(m *certs.Material, https bool) TLSInfo {
	c := m.LeafCert
	sans := append([]string{}, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		sans = append(sans, ip.String())
	}
	return TLSInfo{FingerprintSHA256: m.LeafFingerprintSHA256, Subject: c.Subject.String(), SANs: sans,
		NotBefore: c.NotBefore.UTC().Format(time.RFC3339), NotAfter: c.NotAfter.UTC().Format(time.RFC3339),
		CAFingerprintSHA256: m.CAFingerprintSHA256, AdminHTTPS: https}
}

func (s *Server) tlsHolder() (*certs.Holder, error) {
	if s.surf.opts.TLS == nil {
		return nil, problem(http.StatusNotImplemented, "not_implemented", "this listener was started without the broker's TLS material")
	}
	return s.surf.opts.TLS, nil
}

func init() {
	routeFamilies = append(routeFamilies, func(s *Server, mux *http.ServeMux) {
		mux.HandleFunc("GET /admin/api/connections", s.api(func(w http.ResponseWriter, r *http.Request) error {
			b, err := backend[connectionsBackend](s)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(r.Context(), listTimeout)
			defer cancel()
			list, err := b.Connections(ctx)
			if err != nil {
				return err
			}
			if list == nil {
				list = []broker.ConnectionInfo{}
			}
			writeJSON(w, http.StatusOK, map[string]any{"connections": list})
			return nil
		}))
		mux.HandleFunc("GET /admin/api/subscriptions", s.api(func(w http.ResponseWriter, r *http.Request) error {
			b, err := backend[connectionsBackend](s)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(r.Context(), listTimeout)
			defer cancel()
			list, err := b.Subscriptions(ctx)
			if err != nil {
				return err
			}
			if list == nil {
				list = []broker.SubscriptionInfo{}
			}
			writeJSON(w, http.StatusOK, map[string]any{"subscriptions": list})
			return nil
		}))
		mux.HandleFunc("POST /admin/api/connections/close", s.api(func(w http.ResponseWriter, r *http.Request) error {
			var in closeBody
			if err := readJSON(w, r, &in); err != nil {
				return err
			}
			target := "connection/" + strconv.FormatUint(in.ID, 10)
			if in.ID == 0 {
				target = "session/" + strconv.FormatUint(in.Session, 10)
			}
			closed, err := s.closeConnection(r, in)
			s.audit(r, "connection.close", target, err, "")
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, map[string]any{"closed": true, "connection": uint64(closed.Conn), "was_dormant": closed.WasDormant})
			return nil
		}))
		mux.HandleFunc("GET /admin/api/users", s.api(func(w http.ResponseWriter, r *http.Request) error {
			b, err := backend[usersBackend](s)
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, usersJSON(b))
			return nil
		}))
		mux.HandleFunc("POST /admin/api/users", s.api(func(w http.ResponseWriter, r *http.Request) error {
			var in userBody
			if err := readJSON(w, r, &in); err != nil {
				return err
			}
			created, err := s.putUser(in)
			detail := ""
			switch {
			case err == nil && created:
				detail = "added"
			case err == nil:
				detail = "password changed"
			}
			s.audit(r, "user.put", in.Name, err, detail)
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, map[string]any{"name": in.Name, "created": created})
			return nil
		}))
		mux.HandleFunc("DELETE /admin/api/users/{name}", s.api(func(w http.ResponseWriter, r *http.Request) error {
			name := r.PathValue("name")
			err := s.deleteUser(name)
			s.audit(r, "user.delete", name, err, "")
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, map[string]any{"name": name, "deleted": true})
			return nil
		}))
		mux.HandleFunc("GET /admin/api/tls", s.api(func(w http.ResponseWriter, r *http.Request) error {
			h, err := s.tlsHolder()
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, tlsInfo(h.Current(), s.surf.opts.ServeTLS))
			return nil
		}))
		mux.HandleFunc("POST /admin/api/tls/reload", s.api(func(w http.ResponseWriter, r *http.Request) error {
			h, err := s.tlsHolder()
			if err != nil {
				s.audit(r, "tls.reload", "", err, "")
				return err
			}
			m, err := h.Reload()
			if err != nil {
				p := problem(http.StatusBadRequest, "bad_certificate",
					"the certificate material in %s was refused and the old certificate keeps serving: %v", h.Current().Dir, err)
				s.audit(r, "tls.reload", h.Current().Dir, p, err.Error())
				return p
			}
			s.audit(r, "tls.reload", m.Dir, nil, m.LeafFingerprintSHA256)
			writeJSON(w, http.StatusOK, map[string]any{"reloaded": true, "fingerprint_sha256": m.LeafFingerprintSHA256,
				"not_after": m.LeafCert.NotAfter.UTC().Format(time.RFC3339)})
			return nil
		}))
	})
}

// usersJSON is the answer of GET /admin/api/users (and the users event).
func usersJSON(b usersBackend) map[string]any {
	users := []map[string]string{}
	for _, name := range b.Users() {
		users = append(users, map[string]string{"name": name})
	}
	return map[string]any{"users": users}
}

func (s *Server) closeConnection(r *http.Request, in closeBody) (*node.SessionClosed, error) {
	if in.ID == 0 && in.Session == 0 {
		return nil, problem(http.StatusBadRequest, "bad_parameter", "send the connection's id (or, for a dormant session, its session) from GET /admin/api/connections")
	}
	b, err := backend[connectionsBackend](s)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(r.Context(), listTimeout)
	defer cancel()
	closed, err := b.CloseConnection(ctx, in.ID, in.Session, forceCloseMessage)
	switch {
	case errors.Is(err, broker.ErrNoSuchConnection):
		return nil, problem(http.StatusNotFound, "not_found", "no connection %d (session %d): it may have closed; list them with GET /admin/api/connections", in.ID, in.Session)
	case errors.Is(err, broker.ErrConnectionNotBound):
		return nil, problem(http.StatusConflict, "conflict", "connection %d is still in its handshake (no session yet); retry in a moment", in.ID)
	case err != nil:
		return nil, err
	}
	return closed, nil
}

func (s *Server) putUser(in userBody) (bool, error) {
	b, err := backend[usersBackend](s)
	if err != nil {
		return false, err
	}
	created, err := b.PutUser(in.Name, in.Password)
	if errors.Is(err, broker.ErrBadUser) {
		return false, problem(http.StatusBadRequest, "bad_name", "%v", err)
	}
	return created, err
}

func (s *Server) deleteUser(name string) error {
	b, err := backend[usersBackend](s)
	if err != nil {
		return err
	}
	err = b.DeleteUser(name)
	if errors.Is(err, broker.ErrNoSuchUser) {
		return problem(http.StatusNotFound, "not_found", "no user %q; list them with GET /admin/api/users", name)
	}
	return err
}
