package broker

import (
	"testing"
	"time"
)

// TestVerifiedCacheAnswersRepeatsAndFollowsTheStore: a repeated check is
// answered without argon2id (fast) with the same outcome; a changed stored
// hash (a new password) or a user added under a name checked as unknown is
// checked afresh; a wrong password is never taken for the right one.
func TestVerifiedCacheAnswersRepeatsAndFollowsTheStore(t *testing.T) {
	s, err := openUserStore(t.TempDir(), []UserSeed{{Name: "alice", Password: "secret"}})
	if err != nil {
		t.Fatal(err)
	}
	timed := func(name, pw string) (known, match bool, took time.Duration) {
		start := time.Now()
		known, match = s.lookup(name, pw)
		return known, match, time.Since(start)
	}
	k, m, first := timed("alice", "secret")
	if !k || !m {
		t.Fatalf("first check: known %v match %v", k, m)
	}
	k, m, again := timed("alice", "secret")
	if !k || !m || again > first/4 {
		t.Fatalf("repeat: known %v match %v in %v (first %v)", k, m, again, first)
	}
	if k, m, _ := timed("alice", "wrong"); !k || m {
		t.Fatalf("wrong password: known %v match %v", k, m)
	}
	// Failures are never cached: a repeat costs the full hash again.
	if k, m, took := timed("alice", "wrong"); !k || m || took < first/4 {
		t.Fatalf("wrong password again: known %v match %v in %v (first check %v)", k, m, took, first)
	}
	if k, m, _ := timed("bob", "pw"); k || m {
		t.Fatalf("unknown name: known %v match %v", k, m)
	}
	if _, _, took := timed("bob", "pw"); took < first/4 {
		t.Fatalf("an unknown name answered from the cache in %v (first check %v)", took, first)
	}
	// The store changes under the cache: alice's password, a new bob.
	s.mu.Lock()
	s.users["alice"] = hashUser("alice", "rotated")
	s.users["bob"] = hashUser("bob", "pw")
	s.mu.Unlock()
	if k, m, _ := timed("alice", "secret"); !k || m {
		t.Fatalf("old password after a change: known %v match %v", k, m)
	}
	if k, m, _ := timed("alice", "rotated"); !k || !m {
		t.Fatalf("new password: known %v match %v", k, m)
	}
	if k, m, _ := timed("bob", "pw"); !k || !m {
		t.Fatalf("a user added after an unknown check: known %v match %v", k, m)
	}
}

func TestVerifiedCacheIsBounded(t *testing.T) {
	c := newVerifiedCache()
	for i := 0; i < verifiedCacheEntriesMax+100; i++ {
		c.put(c.id("u", string(rune(i))+"pw"), verifiedEntry{known: true, match: true, storedHash: "h"})
		if len(c.entries) > verifiedCacheEntriesMax || len(c.order)-c.head != len(c.entries) {
			t.Fatalf("after %d: %d entries, order %d from %d", i, len(c.entries), len(c.order), c.head)
		}
	}
	if _, ok := c.get(c.id("u", string(rune(0))+"pw"), true, "h"); ok {
		t.Fatal("the oldest entry survived a full cache")
	}
}

// A burst of first logins with the same credentials (a connection pool
// opening together) runs argon2id at most argonRunsMax times, not once per
// connection, and every one of them is let in: those that waited find the
// outcome in the cache. Without the bound each login would hash on its own
// (argonMemoryKiB each, all at once).
func TestConcurrentFirstLoginsShareOneCheck(t *testing.T) {
	s, err := openUserStore(t.TempDir(), []UserSeed{{Name: "alice", Password: "secret"}})
	if err != nil {
		t.Fatal(err)
	}
	const logins = 8
	before := argonRunCount.Load()
	results := make(chan bool, logins)
	for range logins {
		go func() {
			known, match := s.lookup("alice", "secret")
			results <- known && match
		}()
	}
	for range logins {
		if !<-results {
			t.Fatal("a concurrent login was refused")
		}
	}
	if runs := argonRunCount.Load() - before; runs < 1 || runs > argonRunsMax {
		t.Fatalf("%d concurrent first logins ran argon2id %d times, want 1..%d", logins, runs, argonRunsMax)
	}
}

// The built-in fibril/fibril login (no stored user of that name) is checked
// against the dummy hash once, then answered from the cache; a user named
// fibril created later is checked afresh (the cached "unknown" no longer
// holds), and a wrong password for the built-in name is never cached.
func TestBuiltinLoginIsCheckedOnce(t *testing.T) {
	s, err := openUserStore(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	before := argonRunCount.Load()
	for range 3 {
		if known, match := s.lookup(builtinUser, builtinPassword); known || match {
			t.Fatalf("built-in: known %v match %v, want the store's unknown", known, match)
		}
	}
	if runs := argonRunCount.Load() - before; runs != 1 {
		t.Fatalf("three built-in logins ran argon2id %d times, want 1", runs)
	}
	before = argonRunCount.Load()
	s.lookup(builtinUser, "guess")
	s.lookup(builtinUser, "guess")
	if runs := argonRunCount.Load() - before; runs != 2 {
		t.Fatalf("two wrong built-in passwords ran argon2id %d times, want 2 (failures are not cached)", runs)
	}
	s.mu.Lock()
	s.users[builtinUser] = hashUser(builtinUser, "operator-set")
	s.mu.Unlock()
	if known, match := s.lookup(builtinUser, builtinPassword); !known || match {
		t.Fatalf("after a real fibril user: known %v match %v, want known and refused", known, match)
	}
}

// A login the cache answers needs no argon2id token: with every token
// taken (a flood of wrong passwords hashing), cached still answers at once,
// and the auth workers' submit answers such a login without queueing it.
func TestCachedLoginNeedsNoHashToken(t *testing.T) {
	s, err := openUserStore(t.TempDir(), []UserSeed{{Name: "alice", Password: "secret"}})
	if err != nil {
		t.Fatal(err)
	}
	if known, match := s.lookup("alice", "secret"); !known || !match {
		t.Fatal("first login refused")
	}
	for range argonRunsMax {
		argonRuns <- struct{}{}
	}
	defer func() {
		for range argonRunsMax {
			<-argonRuns
		}
	}()
	done := make(chan bool, 1)
	go func() {
		known, match, hit := s.cached("alice", "secret")
		done <- known && match && hit
	}()
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("a cached login was not answered from the cache")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cached login waited for an argon2id token")
	}
	if _, _, hit := s.cached("alice", "wrong"); hit {
		t.Fatal("a wrong password was answered from the cache")
	}
}
