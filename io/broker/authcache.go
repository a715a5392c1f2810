package broker

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
)

// verifiedCache remembers the outcome of recent password checks, so that a
// client reconnecting (or opening its tenth connection) with the same
// credentials costs a keyed hash, not another argon2id run (argonMemoryKiB
// of memory and tens of milliseconds of CPU each).
//
// Invariants:
//   - entries are keyed by HMAC-SHA256 under a key drawn at start and never
//     stored: the cache holds no password and nothing to check a guess
//     against without the process's memory;
//   - an entry answers only while the store still says what it said at the
//     check: the same "known", and for a known user the same stored hash, so
//     a user added, removed or given a new password is checked afresh;
//   - only successful checks are cached, so every failed login (an unknown
//     name against the dummy hash, a wrong password) costs a full argon2id
//     run as before: timing tells nothing about which names exist or which
//     wrong passwords were tried. The built-in fibril/fibril pair counts as
//     a success while no user of that name exists (the Session admits it
//     from loopback; the pair is public);
//   - at most verifiedCacheEntriesMax entries; when full, the oldest goes.
type verifiedCache struct {
	key     [32]byte
	entries map[[32]byte]verifiedEntry
	order   [][32]byte // insertion order, from head on
	head    int
}

type verifiedEntry struct {
	known, match bool
	storedHash   string // the user's stored hash at the check ("" if unknown)
}

// verifiedCacheEntriesMax bounds the cache (about 100 bytes an entry).
const verifiedCacheEntriesMax = 4096

func newVerifiedCache() *verifiedCache {
	c := &verifiedCache{entries: make(map[[32]byte]verifiedEntry)}
	if _, err := rand.Read(c.key[:]); err != nil {
		panic("users: no randomness for the verified cache key: " + err.Error())
	}
	return c
}

func (c *verifiedCache) id(name, password string) [32]byte {
	m := hmac.New(sha256.New, c.key[:])
	// Length-prefixed: no two (name, password) pairs hash the same input.
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(name)))
	m.Write(n[:])
	m.Write([]byte(name))
	m.Write([]byte(password))
	var out [32]byte
	m.Sum(out[:0])
	return out
}

// get returns the cached outcome for (name, password) if the store still
// says known and storedHash.
func (c *verifiedCache) get(id [32]byte, known bool, storedHash string) (match, ok bool) {
	e, hit := c.entries[id]
	if !hit || e.known != known || e.storedHash != storedHash {
		return false, false
	}
	return e.match, true
}

// put records an outcome, evicting the oldest entry when full.
func (c *verifiedCache) put(id [32]byte, e verifiedEntry) {
	if _, dup := c.entries[id]; !dup {
		for len(c.entries) >= verifiedCacheEntriesMax {
			delete(c.entries, c.order[c.head])
			c.head++
		}
		c.order = append(c.order, id)
		if c.head > len(c.order)/2 {
			c.order = append(c.order[:0], c.order[c.head:]...)
			c.head = 0
		}
	}
	c.entries[id] = e
}
