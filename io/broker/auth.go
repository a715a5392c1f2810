package broker

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fibril-go/fibril/core/node"
	"golang.org/x/crypto/argon2"
)

// Users and password checks (SPEC §10). Invariants:
//   - only argon2id hashes are stored, never passwords;
//   - an unknown name still costs one hash (constant timing); a repeat of
//     a successful check is answered from the verified cache while the
//     store is unchanged for that name (failures are never cached);
//   - the store answers only "known" and "match"; the built-in
//     fibril/fibril rule (loopback only, while no user fibril exists) is the
//     Session machine's, so the simulator runs it too;
//   - '@' names are reserved for nodes and never map to a user.

// argon2id parameters: OWASP's minimum recommendation (19 MiB, 2 passes).
const (
	argonTimeCost  = 2
	argonMemoryKiB = 19 * 1024
	argonThreads   = 1
	argonKeyBytes  = 32
	argonSaltBytes = 16
	// argonRunsMax bounds concurrent argon2id runs (checks and hashing a new
	// password): argonRunsMax * argonMemoryKiB is the most memory logins can
	// hold at once.
	argonRunsMax     = 2
	userNameBytesMax = 128
)

// argonRuns holds a token per argon2id run in progress (argonRunsMax).
var argonRuns = make(chan struct{}, argonRunsMax)

// argonRunCount counts password checks that ran argon2id (tests read it).
var argonRunCount atomic.Int64

// builtinUser is the name of the built-in loopback login (its rule is the
// Session machine's); checks of it are not counted as failures.
const builtinUser = "fibril"

// builtinPassword is the built-in login's password (the Session's rule
// checks it; the store only caches the pair's outcome).
const builtinPassword = "fibril"

type storedUser struct {
	Name string `json:"name"`
	Salt string `json:"salt"` // base64
	Hash string `json:"hash"` // base64 argon2id(password, salt)
}

type userStore struct {
	mu       sync.Mutex
	path     string
	users    map[string]storedUser
	dummy    storedUser     // verified against for unknown names
	verified *verifiedCache // recent outcomes (authcache.go); guarded by mu
}

func validUserName(name string) error {
	switch {
	case name == "" || len(name) > userNameBytesMax:
		return errors.New("config: user names are 1-128 bytes")
	case strings.HasPrefix(name, "@"):
		return errors.New("config: user names starting with '@' are reserved for nodes")
	case strings.ContainsAny(name, ":\n\r\t "):
		return errors.New("config: user names may not contain ':' or whitespace")
	}
	return nil
}

// openUserStore loads <dataDir>/users.json, seeding it while empty.
func openUserStore(dataDir string, seeds []UserSeed) (*userStore, error) {
	s := &userStore{path: filepath.Join(dataDir, "users.json"), users: map[string]storedUser{}, verified: newVerifiedCache()}
	s.dummy = hashUser("@dummy", "dummy-password")
	data, err := os.ReadFile(s.path)
	switch {
	case err == nil:
		var list []storedUser
		if err := json.Unmarshal(data, &list); err != nil {
			return nil, fmt.Errorf("users: %s is corrupt: %w", s.path, err)
		}
		for _, u := range list {
			s.users[u.Name] = u
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("users: %w", err)
	}
	if len(s.users) == 0 && len(seeds) > 0 {
		for _, seed := range seeds {
			s.users[seed.Name] = hashUser(seed.Name, seed.Password)
		}
		if err := s.save(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func hashUser(name, password string) storedUser {
	salt := make([]byte, argonSaltBytes)
	if _, err := rand.Read(salt); err != nil {
		panic("users: no randomness for a salt: " + err.Error())
	}
	argonRuns <- struct{}{}
	key := argon2.IDKey([]byte(password), salt, argonTimeCost, argonMemoryKiB, argonThreads, argonKeyBytes)
	<-argonRuns
	return storedUser{Name: name, Salt: base64.StdEncoding.EncodeToString(salt), Hash: base64.StdEncoding.EncodeToString(key)}
}

func (s *userStore) save() error {
	list := make([]storedUser, 0, len(s.users))
	for _, u := range s.users {
		list = append(list, u)
	}
	data, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(s.path, data, 0o600)
}

// lookup checks a login against the store: known says a user of that
// name exists, match that the password is theirs. An unknown name still
// costs one hash (constant timing). The built-in fibril/fibril rule is the
// Session machine's (it knows the peer and the config), not the store's.
//
// A (name, password) checked before, against what the store still holds,
// is answered from the verified cache without hashing (authcache.go).
// cached answers a login from the verified cache alone; hit is false when
// it must be checked (lookup).
func (s *userStore) cached(name, password string) (known, match, hit bool) {
	id := s.verified.id(name, password)
	s.mu.Lock()
	defer s.mu.Unlock()
	u, known := s.users[name]
	match, hit = s.verified.get(id, known, u.Hash)
	return known, match, hit
}

func (s *userStore) lookup(name, password string) (known, match bool) {
	id := s.verified.id(name, password)
	s.mu.Lock()
	u, known := s.users[name]
	cached, hit := s.verified.get(id, known, u.Hash)
	s.mu.Unlock()
	if hit {
		return known, cached
	}
	// At most argonRunsMax hashes at once: each takes argonMemoryKiB, so a
	// burst of first logins (a pool of connections opening together) would
	// otherwise allocate 19 MiB per connection at the same moment. Whoever
	// waited looks at the cache again: the run it waited behind was often
	// the same name and password.
	argonRuns <- struct{}{}
	defer func() { <-argonRuns }()
	s.mu.Lock()
	u, known = s.users[name]
	cached, hit = s.verified.get(id, known, u.Hash)
	s.mu.Unlock()
	if hit {
		return known, cached
	}
	if !known {
		s.verify(s.dummy, password)
	} else {
		match = s.verify(u, password)
	}
	if match || (!known && name == builtinUser && password == builtinPassword) {
		// Only successes: a cached failure would answer fast and so tell a
		// prober that this exact wrong pair was tried lately (a user's
		// typo, a password from before a rotation). The one exception is
		// the built-in fibril/fibril while no user of that name exists: the
		// Session lets it in from loopback, so for the store it is a
		// success, and the pair is public. Without it every default login
		// ran argon2id against the dummy hash (19 MiB, ~30 ms of CPU).
		s.mu.Lock()
		s.verified.put(id, verifiedEntry{known: known, match: match, storedHash: u.Hash})
		s.mu.Unlock()
	}
	return known, match
}

func (s *userStore) verify(u storedUser, password string) bool {
	salt, err1 := base64.StdEncoding.DecodeString(u.Salt)
	want, err2 := base64.StdEncoding.DecodeString(u.Hash)
	if err1 != nil || err2 != nil {
		return false
	}
	argonRunCount.Add(1)
	got := argon2.IDKey([]byte(password), salt, argonTimeCost, argonMemoryKiB, argonThreads, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1
}

// writeFileAtomic writes data to path through a synced temporary file and a
// rename, then syncs the directory, so a crash leaves the old or the new file.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// authWorkers: password checks (argon2id, a CPU job a machine requests as
// a PasswordCheck effect) run on a bounded pool of goroutines, each check
// costing argonMemoryKiB: unauthenticated peers must not multiply that.
// Invariants:
//   - at most authChecksQueuedMax checks wait; past it a check is answered
//     at once as unknown (AUTH_ERR), never queued without bound;
//   - every accepted check is answered exactly once, to the session that
//     asked, as AuthChecked with its Token.
type authWorkers struct {
	b     *Broker
	mu    sync.Mutex
	wake  sync.Cond
	queue []authJob
	max   int
	stop  bool
	done  sync.WaitGroup
}

type authJob struct {
	from  *actor
	check node.PasswordCheck
}

// authChecksQueuedMaxFloor is the least room the queue has; it grows with
// the connection limit (one check per connection at a time).
const authChecksQueuedMaxFloor = 64

func newAuthWorkers(b *Broker, workers, queuedMax int) *authWorkers {
	w := &authWorkers{b: b, max: max(queuedMax, authChecksQueuedMaxFloor)}
	w.wake.L = &w.mu
	for range workers {
		w.done.Add(1)
		go w.run()
	}
	return w
}

func (w *authWorkers) submit(from *actor, check node.PasswordCheck) {
	// A login the cache answers needs no worker: answered here, it cannot
	// wait in the queue behind a flood of wrong passwords (each holds a
	// worker for a whole argon2id run, at most argonRunsMax at once).
	if known, match, hit := w.b.users.cached(check.Username, check.Password); hit {
		w.b.pushDetached(from, &node.AuthChecked{Token: check.Token, Known: known, Match: match})
		return
	}
	w.mu.Lock()
	if len(w.queue) >= w.max || w.stop {
		w.mu.Unlock()
		w.b.metrics.authFailures.Add(1)
		w.b.pushDetached(from, &node.AuthChecked{Token: check.Token})
		return
	}
	w.queue = append(w.queue, authJob{from: from, check: check})
	w.wake.Signal()
	w.mu.Unlock()
}

func (w *authWorkers) run() {
	defer w.done.Done()
	for {
		w.mu.Lock()
		for len(w.queue) == 0 && !w.stop {
			w.wake.Wait()
		}
		if w.stop {
			w.mu.Unlock()
			return
		}
		job := w.queue[0]
		w.queue = w.queue[1:]
		w.mu.Unlock()
		known, match := w.b.users.lookup(job.check.Username, job.check.Password)
		if !match && job.check.Username != builtinUser {
			w.b.metrics.authFailures.Add(1)
		}
		w.b.deliverTo(job.from, &node.AuthChecked{Token: job.check.Token, Known: known, Match: match})
	}
}

func (w *authWorkers) close() {
	w.mu.Lock()
	w.stop = true
	w.wake.Broadcast()
	w.mu.Unlock()
	w.done.Wait()
}
