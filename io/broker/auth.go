//go:build !fibril_next

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

	"golang.org/x/crypto/argon2"
)

// Users and password checks (SPEC §10). Invariants:
//   - only argon2id hashes are stored, never passwords;
//   - an unknown name still costs one hash (constant timing);
//   - the built-in fibril/fibril pair works from loopback peers only, and
//     only while no real user named fibril exists;
//   - '@' names are reserved for nodes and never map to a user.

// argon2id parameters: OWASP's minimum recommendation (19 MiB, 2 passes).
const (
	argonTimeCost    = 2
	argonMemoryKiB   = 19 * 1024
	argonThreads     = 1
	argonKeyBytes    = 32
	argonSaltBytes   = 16
	userNameBytesMax = 128
)

const (
	builtinUser     = "fibril"
	builtinPassword = "fibril"
)

type storedUser struct {
	Name string `json:"name"`
	Salt string `json:"salt"` // base64
	Hash string `json:"hash"` // base64 argon2id(password, salt)
}

type userStore struct {
	mu    sync.Mutex
	path  string
	users map[string]storedUser
	dummy storedUser // verified against for unknown names
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
	s := &userStore{path: filepath.Join(dataDir, "users.json"), users: map[string]storedUser{}}
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
	key := argon2.IDKey([]byte(password), salt, argonTimeCost, argonMemoryKiB, argonThreads, argonKeyBytes)
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

// errAuthDenied is what every wrong credential gets: it never says which part
// was wrong.
var errAuthDenied = errors.New("authentication failed: wrong user name or password")

// errDefaultRemote explains why the built-in pair failed from afar.
var errDefaultRemote = errors.New("authentication failed: the built-in fibril/fibril login works from loopback only; " +
	"add a user with 'fibril serve --user NAME:PASSWORD' and connect with it")

// check verifies a login. loopback says whether the peer is on this machine.
func (s *userStore) check(name, password string, loopback bool, allowDefault bool) error {
	s.mu.Lock()
	u, known := s.users[name]
	s.mu.Unlock()
	if !known {
		s.verify(s.dummy, password) // constant timing for unknown names
		if name == builtinUser && allowDefault {
			if subtle.ConstantTimeCompare([]byte(password), []byte(builtinPassword)) != 1 {
				return errAuthDenied
			}
			if !loopback {
				return errDefaultRemote
			}
			return nil
		}
		return errAuthDenied
	}
	if !s.verify(u, password) {
		return errAuthDenied
	}
	return nil
}

func (s *userStore) verify(u storedUser, password string) bool {
	salt, err1 := base64.StdEncoding.DecodeString(u.Salt)
	want, err2 := base64.StdEncoding.DecodeString(u.Hash)
	if err1 != nil || err2 != nil {
		return false
	}
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

// checkCredentials runs one password check, at most authChecksInflightMax at a
// time: each argon2id check takes argonMemoryKiB of memory, and unauthenticated
// peers must not be able to multiply that.
func (b *Broker) checkCredentials(name, password string, loopback bool) error {
	b.authSlots <- struct{}{}
	defer func() { <-b.authSlots }()
	return b.users.check(name, password, loopback, b.cfg.AllowDefaultLoopback)
}
