package node

import (
	"errors"
	"strings"
	"testing"

	"github.com/fibril-go/fibril/core"
)

// The Node's quarantine decisions (node_quarantine.go, SPEC 7): one test
// per rule, then a rapid model (node_quarantine_rapid_test.go).

// stepQ steps in (persisting as step does) and returns the quarantine
// report of that step, if it made one.
func (h *nodeHarness) stepQ(in Input) (effects, *QuarantineReport) {
	h.t.Helper()
	e := h.stepRaw(in)
	report := h.n.rd.Quarantine
	if h.autoPersist {
		e.merge(h.persist())
	}
	return e, report
}

var damageChecksum = &LoadDamage{Kind: "checksum", Reason: "checksum mismatch at index 7", Index: 7}

// openDamaged opens topic/partition from sid and answers its load with d.
func (h *nodeHarness) openDamaged(sid SessionID, topic string, partition uint32, d *LoadDamage) (*Opened, *QuarantineReport) {
	h.t.Helper()
	e := h.deliver(SessionAddr(sid), &Open{Token: 9, Topic: topic, Partition: partition})
	if len(e.load) != 1 {
		h.t.Fatalf("want one load, got %+v", e.load)
	}
	e, report := h.stepQ(&LoadDone{NowMs: h.now, Queue: e.load[0].Queue, Damage: d})
	opened, _ := envelopesOf[*Opened](e)
	if len(opened) != 1 {
		h.t.Fatalf("want one Opened, got %+v", e.out)
	}
	return opened[0], report
}

func wantQuarantined(t *testing.T, err *core.Error, name string) {
	t.Helper()
	if err == nil || err.Code() != core.CodeInternal || err.Retryable() ||
		!strings.Contains(err.Error(), "partition "+name+" is quarantined: ") ||
		!strings.Contains(err.Error(), "repair with POST /admin/api/quarantine/repair or fibrilctl admin quarantine repair") {
		t.Fatalf("want the quarantine refusal of %s, got %v", name, err)
	}
}

func TestQuarantineParksADamagedPartitionAndServesTheRest(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, _ := h.hello(nil)
	opened, report := h.openDamaged(sid, "jobs", 0, damageChecksum)
	wantQuarantined(t, opened.Err, "jobs/0")
	if !strings.Contains(opened.Err.Error(), damageChecksum.Reason) {
		t.Fatalf("the refusal does not say what was found: %v", opened.Err)
	}
	if report == nil || len(report.Entries) != 1 || report.QuarantinesTotal != 1 || report.Refused {
		t.Fatalf("report %+v", report)
	}
	if got := report.Entries[0]; got.Queue != qid("jobs", 0) || got.Damage != "checksum" || got.Index != 7 || got.DetectedAtMs != h.now || got.Kind != KindQueue {
		t.Fatalf("entry %+v", got)
	}
	// Parked: refused at once, no load.
	e := h.deliver(SessionAddr(sid), &Open{Token: 10, Topic: "jobs"})
	if len(e.load) != 0 {
		t.Fatalf("a parked partition was loaded again: %+v", e.load)
	}
	refused, _ := envelopesOf[*Opened](e)
	wantQuarantined(t, refused[0].Err, "jobs/0")
	// Everything else serves.
	if o := h.openQueue(sid, "mail", 0); o.Err != nil {
		t.Fatalf("another queue: %+v", o)
	}
	// A declare touching it is refused; one of another queue is not.
	e = h.deliver(SessionAddr(sid), &DeclareQueue{Token: 11, Topic: "jobs", PartitionCount: 1})
	declared, _ := envelopesOf[*Declared](e)
	if len(declared) != 1 {
		t.Fatalf("declare answers %+v", e.out)
	}
	wantQuarantined(t, declared[0].Err, "jobs/0")
	e = h.deliver(SessionAddr(sid), &DeclareQueue{Token: 12, Topic: "mail", PartitionCount: 1})
	if declared, _ := envelopesOf[*Declared](e); len(declared) != 1 || declared[0].Err != nil {
		t.Fatalf("declare of another queue %+v", e.out)
	}
}

func TestQuarantineIsFoundAgainAfterARestart(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, _ := h.hello(nil)
	h.openDamaged(sid, "jobs", 0, damageChecksum)
	h.restart(7)
	h.tick(0)
	_, sid, _, _ = h.hello(nil)
	// Lazy: nothing is parked until the first load finds the damage again
	// (the driver left the files as they were).
	if len(h.n.quar.entries) != 0 {
		t.Fatal("the set survived a restart in memory")
	}
	opened, report := h.openDamaged(sid, "jobs", 0, damageChecksum)
	wantQuarantined(t, opened.Err, "jobs/0")
	if report == nil || report.QuarantinesTotal != 1 {
		t.Fatalf("report after restart %+v", report)
	}
}

func TestQuarantineRefusePolicyReportsRefused(t *testing.T) {
	cfg := testNodeConfig()
	cfg.RecoveryOnMismatch = MismatchRefuse
	h := newNodeHarness(t, cfg)
	_, sid, _, _ := h.hello(nil)
	opened, report := h.openDamaged(sid, "jobs", 0, damageChecksum)
	wantQuarantined(t, opened.Err, "jobs/0")
	if report == nil || !report.Refused || !report.Entries[0].Refused {
		t.Fatalf("refuse: report %+v", report)
	}
}

func TestQuarantineIgnorePolicyCutsAndServes(t *testing.T) {
	cfg := testNodeConfig()
	cfg.RecoveryOnMismatch = MismatchIgnore
	h := newNodeHarness(t, cfg)
	_, sid, _, _ := h.hello(nil)
	e := h.deliver(SessionAddr(sid), &Open{Token: 1, Topic: "jobs"})
	e, report := h.stepQ(&LoadDone{NowMs: h.now, Queue: qid("jobs", 0), Damage: damageChecksum})
	if len(e.load) != 1 || !e.load[0].Truncate || e.load[0].Queue != qid("jobs", 0) || len(e.out) != 0 || report != nil {
		t.Fatalf("ignore: want one truncating load and the Open waiting, got %+v (report %+v)", e, report)
	}
	e = h.step(&LoadDone{NowMs: h.now, Queue: qid("jobs", 0), Cut: &LoadCut{Index: 7, DroppedRecords: 3}})
	opened, _ := envelopesOf[*Opened](e)
	if len(opened) != 1 || opened[0].Err != nil || opened[0].Token != 1 {
		t.Fatalf("ignore: after the cut %+v", e.out)
	}
	// Damage with no cut point (a snapshot), or found again by the
	// truncating load, parks it even under ignore.
	e = h.deliver(SessionAddr(sid), &Open{Token: 2, Topic: "snap"})
	h.persist()
	e = h.step(&LoadDone{NowMs: h.now, Queue: qid("snap", 0), Damage: &LoadDamage{Kind: "snapshot", Reason: "the snapshot does not decode"}})
	opened, _ = envelopesOf[*Opened](e)
	if len(opened) != 1 {
		t.Fatalf("snapshot damage: %+v", e)
	}
	wantQuarantined(t, opened[0].Err, "snap/0")
	e = h.deliver(SessionAddr(sid), &Open{Token: 3, Topic: "again"})
	e.merge(h.persist())
	e = h.step(&LoadDone{NowMs: h.now, Queue: qid("again", 0), Damage: damageChecksum})
	if len(e.load) != 1 || !e.load[0].Truncate {
		t.Fatalf("want a truncating load: %+v", e.load)
	}
	e = h.step(&LoadDone{NowMs: h.now, Queue: qid("again", 0), Damage: damageChecksum})
	opened, _ = envelopesOf[*Opened](e)
	if len(opened) != 1 || len(e.load) != 0 {
		t.Fatalf("damage found again: %+v", e)
	}
	wantQuarantined(t, opened[0].Err, "again/0")
}

func TestQuarantineRepair(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, _ := h.hello(nil)
	h.openDamaged(sid, "jobs", 0, damageChecksum)
	admin := AdminAddr(1)
	repairedOf := func(e effects) *QuarantineRepaired {
		t.Helper()
		got, to := envelopesOf[*QuarantineRepaired](e)
		if len(got) != 1 || to[0].Kind != AddrAdmin {
			t.Fatalf("want one answer to the operator, got %+v", e.out)
		}
		return got[0]
	}
	// Unknown queue, partition out of range, a partition that serves.
	if r := repairedOf(h.deliver(admin, &RepairQuarantine{Queue: qid("nope", 0)})); r.Outcome != RepairUnknown {
		t.Fatalf("unknown: %+v", r)
	}
	if r := repairedOf(h.deliver(admin, &RepairQuarantine{Queue: qid("jobs", 3)})); r.Outcome != RepairUnknown {
		t.Fatalf("out of range: %+v", r)
	}
	h.openQueue(sid, "mail", 0)
	if r := repairedOf(h.deliver(admin, &RepairQuarantine{Queue: qid("mail", 0)})); r.Outcome != RepairNotQuarantined {
		t.Fatalf("not quarantined: %+v", r)
	}
	// The repair: a truncating load; nothing answered until it is done,
	// a second repair meanwhile is busy, opens are still refused.
	e := h.deliver(admin, &RepairQuarantine{Queue: qid("jobs", 0)})
	if len(e.load) != 1 || !e.load[0].Truncate || len(e.out) != 0 {
		t.Fatalf("repair: %+v", e)
	}
	busy, to := envelopesOf[*QuarantineRepaired](h.deliver(AdminAddr(2), &RepairQuarantine{Queue: qid("jobs", 0)}))
	if len(busy) != 1 || busy[0].Outcome != RepairBusy || to[0] != AdminAddr(2) {
		t.Fatalf("second repair: %+v to %v", busy, to)
	}
	if o := h.openQueueNoLoad(sid, "jobs"); o.Err == nil {
		t.Fatal("an open during the repair was served")
	}
	// A repair whose load fails leaves it parked.
	e, _ = h.stepQ(&LoadDone{NowMs: h.now, Queue: qid("jobs", 0), Err: errors.New("disk full")})
	if got, to := envelopesOf[*QuarantineRepaired](e); len(got) != 1 || to[0] != admin || got[0].Outcome != RepairFailed || !strings.Contains(got[0].Err, "disk full") {
		t.Fatalf("failed repair: %+v", got)
	}
	if len(h.n.quar.entries) != 1 {
		t.Fatal("a failed repair cleared the quarantine")
	}
	// Again, and it loads: cleared, reported, served.
	h.deliver(admin, &RepairQuarantine{Queue: qid("jobs", 0)})
	e, report := h.stepQ(&LoadDone{NowMs: h.now, Queue: qid("jobs", 0), Cut: &LoadCut{Index: 7, DroppedRecords: 4}})
	if r := repairedOf(e); r.Outcome != RepairDone || r.TruncatedEntries != 4 || r.Entry.Queue != qid("jobs", 0) || r.Entry.Index != 7 {
		t.Fatalf("repair done: %+v", r)
	}
	if report == nil || len(report.Entries) != 0 || report.QuarantinesTotal != 1 {
		t.Fatalf("report after the repair %+v", report)
	}
	if o := h.openQueue(sid, "jobs", 0); o.Err != nil {
		t.Fatalf("open after the repair: %+v", o)
	}
	if r := repairedOf(h.deliver(admin, &RepairQuarantine{Queue: qid("jobs", 0)})); r.Outcome != RepairNotQuarantined {
		t.Fatalf("a repaired partition repaired again: %+v", r)
	}
}

// openQueueNoLoad opens topic/0 and returns the answer, failing if the
// open asked for a load.
func (h *nodeHarness) openQueueNoLoad(sid SessionID, topic string) *Opened {
	h.t.Helper()
	e := h.deliver(SessionAddr(sid), &Open{Token: 21, Topic: topic})
	if len(e.load) != 0 {
		h.t.Fatalf("an open of %s asked for a load", topic)
	}
	opened, _ := envelopesOf[*Opened](e)
	if len(opened) != 1 {
		h.t.Fatalf("want one Opened: %+v", e.out)
	}
	return opened[0]
}

func TestQuarantineOfAStreamPartition(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	_, sid, _, _ := h.hello(nil)
	h.deliver(SessionAddr(sid), &DeclareStream{Token: 1, Topic: "ticks", Settings: core.StreamSettings{PartitionCount: 2}})
	e := h.deliver(SessionAddr(sid), &Open{Token: 2, Topic: "ticks", Partition: 1, Stream: true})
	if len(e.load) != 1 || e.load[0].Kind != KindStream {
		t.Fatalf("stream load: %+v", e)
	}
	e, report := h.stepQ(&LoadDone{NowMs: h.now, Queue: e.load[0].Queue, Damage: damageChecksum})
	opened, _ := envelopesOf[*Opened](e)
	wantQuarantined(t, opened[0].Err, "ticks/1")
	if report == nil || report.Entries[0].Kind != KindStream {
		t.Fatalf("stream report %+v", report)
	}
	e = h.deliver(AdminAddr(5), &RepairQuarantine{Queue: core.QueueID{Topic: "ticks", Partition: 1}})
	if len(e.load) != 1 || e.load[0].Kind != KindStream || !e.load[0].Truncate {
		t.Fatalf("stream repair load %+v", e.load)
	}
	e = h.step(&LoadDone{NowMs: h.now, Queue: e.load[0].Queue})
	if got, _ := envelopesOf[*QuarantineRepaired](e); len(got) != 1 || got[0].Outcome != RepairDone {
		t.Fatalf("stream repair %+v", e.out)
	}
}

func TestQuarantinePolicyValidated(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RecoveryOnMismatch = MismatchIgnore + 1
	if cfg.Validate() == nil {
		t.Fatal("an unknown policy was accepted")
	}
	for _, text := range []string{"quarantine", "refuse", "ignore"} {
		p, ok := ParseMismatchPolicy(text)
		if !ok || p.String() != text {
			t.Fatalf("%s parsed as %v", text, p)
		}
	}
	if _, ok := ParseMismatchPolicy("skip"); ok {
		t.Fatal("skip parsed")
	}
}
