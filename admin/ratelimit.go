package admin

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Failed credentials, rate-limited per peer address. A guessing script
// would otherwise try passwords as fast as the listener answers. Invariants:
//   - a peer with failuresMax failed attempts (a wrong login or basic-auth
//     password) within failureWindow is answered 429 with Retry-After until
//     the window of its first failure ends, before the credentials are
//     even compared (so a right password does not leak a guess either);
//   - a success does not reset the count (an attacker who knows one
//     password gains nothing from it against another name);
//   - the table holds at most failurePeersMax peers: when full, windows
//     that ended are dropped, and if none has, the whole table (an attacker
//     spraying addresses gets a fresh budget, never the broker's memory).

const (
	failuresMax     = 10
	failureWindow   = time.Minute
	failurePeersMax = 4096
)

type failureCount struct {
	first time.Time
	n     int
}

type failureLimiter struct {
	mu    sync.Mutex
	peers map[string]failureCount
}

// peerOf is the address part of r.RemoteAddr (all ports of a host count
// as one peer).
func peerOf(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// blocked says how long peer must wait (0: it may try).
func (l *failureLimiter) blocked(peer string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.peers[peer]
	if !ok || now.Sub(c.first) >= failureWindow {
		return 0
	}
	if c.n < failuresMax {
		return 0
	}
	return failureWindow - now.Sub(c.first)
}

// failed counts one failed attempt of peer.
func (l *failureLimiter) failed(peer string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.peers == nil {
		l.peers = map[string]failureCount{}
	}
	c, ok := l.peers[peer]
	if !ok || now.Sub(c.first) >= failureWindow {
		if !ok && len(l.peers) >= failurePeersMax {
			for p, old := range l.peers {
				if now.Sub(old.first) >= failureWindow {
					delete(l.peers, p)
				}
			}
			if len(l.peers) >= failurePeersMax {
				clear(l.peers)
			}
		}
		c = failureCount{first: now}
	}
	c.n++
	l.peers[peer] = c
}

// tooMany answers 429 with Retry-After.
func tooMany(w http.ResponseWriter, wait time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
	writeError(w, http.StatusTooManyRequests, "too_many_attempts",
		"too many failed logins from this address; wait "+strconv.Itoa(int(wait.Seconds())+1)+" s and check the admin credentials (admin.auth.username, admin.auth.password)")
}
