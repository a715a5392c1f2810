package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// cleaningBroker records when Cleanup ran relative to the scenario.
type cleaningBroker struct {
	*fakeBroker
	cleanups    int
	cleanedWith context.Context
	queueAtEnd  int
}

func (c *cleaningBroker) Cleanup(ctx context.Context) error {
	c.cleanups++
	c.cleanedWith = ctx
	c.queueAtEnd = len(c.queue)
	return nil
}

// Run calls a Cleaner's Cleanup once after the scenario, also after a
// timeout, with a context of its own (the run's has ended by then).
func TestRunCleansUpAfterEveryOutcome(t *testing.T) {
	w := Workload{Scenario: ScenarioConfirmedPublish, Msgs: 200, SizeBytes: 16, Producers: 2, Window: 4}
	ok := &cleaningBroker{fakeBroker: newFakeBroker(w.Producers)}
	if _, status := Run(ok, w, RunOptions{System: "fake", Timeout: 30 * time.Second}); status != StatusOK {
		t.Fatalf("status %s", status)
	}
	if ok.cleanups != 1 || ok.queueAtEnd != w.Msgs {
		t.Fatalf("cleanups %d, queue %d at cleanup: want one Cleanup after all %d publishes", ok.cleanups, ok.queueAtEnd, w.Msgs)
	}
	stuck := &cleaningBroker{fakeBroker: newFakeBroker(w.Producers)}
	stuck.neverConfirm = true
	if _, status := Run(stuck, w, RunOptions{System: "fake", Timeout: 100 * time.Millisecond}); status != StatusTimeout {
		t.Fatalf("status %s", status)
	}
	if stuck.cleanups != 1 || stuck.cleanedWith.Err() == nil {
		// the context is cancelled once Cleanup returned; it was live during it
		t.Fatalf("cleanups %d after a timeout", stuck.cleanups)
	}
}

// A failed Cleanup is said on the line: what it left behind weighs on the
// runs after it.
func TestRunSaysAFailedCleanup(t *testing.T) {
	w := Workload{Scenario: ScenarioConfirmedPublish, Msgs: 20, SizeBytes: 16, Producers: 1, Window: 4}
	b := &failingCleaner{fakeBroker: newFakeBroker(w.Producers)}
	line, status := Run(b, w, RunOptions{System: "fake", Timeout: 30 * time.Second})
	if status != StatusOK {
		t.Fatalf("status %s: a failed Cleanup changes no figure of its own run", status)
	}
	if got := line.String(); !strings.Contains(got, `cleanup_err="queue in use"`) {
		t.Fatalf("line %q does not say the Cleanup failed", got)
	}
}

type failingCleaner struct{ *fakeBroker }

func (failingCleaner) Cleanup(context.Context) error { return errors.New("queue in use") }

// Fibril's Cleanup deletes the run's queue through the admin API, and only
// when it was given the admin address; a refusal comes back as an error
// carrying the API's answer.
func TestFibrilCleanupDeletesTheQueueThroughTheAdminAPI(t *testing.T) {
	var gotPath, gotTopic string
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Topic string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		gotPath, gotTopic = r.Method+" "+r.URL.Path, body.Topic
		w.WriteHeader(status)
		fmt.Fprint(w, `{"error":"in_use"}`)
	}))
	defer srv.Close()
	f := &Fibril{AdminURL: srv.URL + "/", topic: "bench.x", w: Workload{Scenario: ScenarioEndToEnd}}
	if err := f.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if gotPath != "POST /admin/api/queues/delete" || gotTopic != "bench.x" {
		t.Fatalf("request %q topic %q", gotPath, gotTopic)
	}
	status = http.StatusConflict
	if err := f.Cleanup(context.Background()); err == nil || !strings.Contains(err.Error(), "in_use") {
		t.Fatalf("a 409 gave %v, want an error with the API's answer", err)
	}
	// Several queues (a sweep's shape): every one of them is deleted.
	status = http.StatusOK
	var deleted []string
	many := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Topic string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		deleted = append(deleted, body.Topic)
	}))
	defer many.Close()
	f = &Fibril{AdminURL: many.URL, topic: "q", topics: []string{"q", "q.q1", "q.q2"}, w: Workload{Scenario: ScenarioConfirmedPublish}}
	if err := f.Cleanup(context.Background()); err != nil || strings.Join(deleted, ",") != "q,q.q1,q.q2" {
		t.Fatalf("deleted %v (err %v), want every queue", deleted, err)
	}
	gotPath = ""
	for _, quiet := range []*Fibril{
		{topic: "bench.x", w: Workload{Scenario: ScenarioEndToEnd}},                  // no admin address
		{AdminURL: srv.URL, topic: "bench.x", w: Workload{Scenario: ScenarioFanout}}, // a stream: no delete in the API
	} {
		if err := quiet.Cleanup(context.Background()); err != nil || gotPath != "" {
			t.Fatalf("Cleanup sent %q (err %v) where it must not touch the broker", gotPath, err)
		}
	}
}
