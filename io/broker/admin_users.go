package broker

// User administration for the admin API (GET/POST/DELETE
// /admin/api/users). Invariants:
//   - the store is changed and saved under its lock, the file first: a
//     change that could not be made durable is not made at all;
//   - the verified-credentials cache (authcache.go) keys each entry by the
//     stored hash it was checked against, so a removed user or a new
//     password answers no cached success: the next check is afresh;
//   - names are validated as config seeds are; '@' names (nodes) refused;
//   - listings carry names only, never salts or hashes.

import (
	"errors"
	"fmt"
	"sort"
)

// userPasswordBytesMax bounds a password set through the API.
const userPasswordBytesMax = 1024

// usersMax bounds the user store's size through the API.
const usersMax = 10_000

// ErrNoSuchUser answers a removal of a name the store does not hold.
var ErrNoSuchUser = errors.New("broker: no such user")

// ErrBadUser wraps a refused name or password (the message says why).
var ErrBadUser = errors.New("broker: bad user")

// Users lists the user names, sorted.
func (b *Broker) Users() []string {
	s := b.users
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.users))
	for name := range s.users {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// PutUser adds a user, or gives an existing one a new password; created
// says which. The argon2id hash is computed before the lock is taken.
func (b *Broker) PutUser(name, password string) (created bool, err error) {
	if err := validUserName(name); err != nil {
		return false, fmt.Errorf("%w: %v", ErrBadUser, err)
	}
	if password == "" || len(password) > userPasswordBytesMax {
		return false, fmt.Errorf("%w: a password is 1-%d bytes", ErrBadUser, userPasswordBytesMax)
	}
	u := hashUser(name, password)
	s := b.users
	s.mu.Lock()
	defer s.mu.Unlock()
	old, existed := s.users[name]
	if !existed && len(s.users) >= usersMax {
		return false, fmt.Errorf("%w: the store holds %d users, its cap", ErrBadUser, usersMax)
	}
	s.users[name] = u
	if err := s.save(); err != nil {
		if existed {
			s.users[name] = old
		} else {
			delete(s.users, name)
		}
		return false, err
	}
	assertTrue(s.users[name].Hash == u.Hash, "the saved store holds the new hash")
	return !existed, nil
}

// DeleteUser removes a user; its sessions already authenticated keep
// running (as a password change does not cut them), new AUTHs fail.
func (b *Broker) DeleteUser(name string) error {
	s := b.users
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.users[name]
	if !ok {
		return ErrNoSuchUser
	}
	delete(s.users, name)
	if err := s.save(); err != nil {
		s.users[name] = old
		return err
	}
	return nil
}
