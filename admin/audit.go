package admin

import (
	"net/http"
	"sync"
	"time"
)

// The audit ring (SPEC 11): the newest auditRingSize operator actions, in
// memory. Invariants:
//   - every mutation the API carries out records one entry, whether it
//     succeeded or not (Outcome says which), after the broker answered;
//   - the ring never grows: the oldest entry is overwritten;
//   - entries are returned newest first, each with a sequence number that
//     only grows, so a reader can ask for what is newer than it has seen.

// auditRingSize is how many entries the ring keeps.
const auditRingSize = 512

// AuditEntry is one operator action.
type AuditEntry struct {
	Seq    uint64 `json:"seq"`
	AtMs   int64  `json:"at_ms"`
	Actor  string `json:"actor"`  // the authenticated admin user, else the peer address
	Action string `json:"action"` // e.g. "queue.delete", "quarantine.repair"
	Target string `json:"target"` // what it acted on, e.g. "orders/default"
	// Outcome is "ok" or the error code answered.
	Outcome string `json:"outcome"`
	Detail  string `json:"detail,omitempty"`
}

type auditRing struct {
	mu      sync.Mutex
	entries [auditRingSize]AuditEntry
	seq     uint64 // entries recorded so far
}

// record appends e, stamping its sequence number.
func (a *auditRing) record(e AuditEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seq++
	e.Seq = a.seq
	a.entries[(a.seq-1)%auditRingSize] = e
}

// newest returns up to limit entries with Seq > after, newest first.
func (a *auditRing) newest(after uint64, limit int) []AuditEntry {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]AuditEntry, 0, min(limit, auditRingSize))
	for seq := a.seq; seq > after && seq > 0 && len(out) < limit; seq-- {
		if a.seq-seq >= auditRingSize {
			break // overwritten
		}
		out = append(out, a.entries[(seq-1)%auditRingSize])
	}
	return out
}

// actorFunc names who made a request; the auth layer replaces it.
var actorFunc = func(r *http.Request) string { return r.RemoteAddr }

// audit records one operator action of request r. outcome is "ok" or the
// error code the request was answered with.
func (s *Server) audit(r *http.Request, action, target string, err error, detail string) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
		if p, ok := err.(*Problem); ok {
			outcome = p.Code
		}
	}
	s.auditLog.record(AuditEntry{AtMs: time.Now().UnixMilli(), Actor: actorFunc(r), Action: action,
		Target: target, Outcome: outcome, Detail: detail})
}

func init() {
	routeFamilies = append(routeFamilies, func(s *Server, mux *http.ServeMux) {
		mux.HandleFunc("GET /admin/api/audit", s.api(func(w http.ResponseWriter, r *http.Request) error {
			after, err := queryUint(r, "after", 0, 1<<63)
			if err != nil {
				return err
			}
			limit, err := queryUint(r, "limit", auditRingSize, auditRingSize)
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, map[string]any{"entries": s.auditLog.newest(after, int(limit))})
			return nil
		}))
	})
}
