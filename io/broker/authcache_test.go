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
