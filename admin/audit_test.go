package admin

import "testing"

func TestAuditRingKeepsTheNewestNewestFirst(t *testing.T) {
	var a auditRing
	for i := 0; i < auditRingSize+10; i++ {
		a.record(AuditEntry{Action: "x"})
	}
	got := a.newest(0, 1000)
	if len(got) != auditRingSize {
		t.Fatalf("kept %d entries, want %d", len(got), auditRingSize)
	}
	if got[0].Seq != auditRingSize+10 || got[len(got)-1].Seq != 11 {
		t.Fatalf("newest %d oldest %d, want %d and 11", got[0].Seq, got[len(got)-1].Seq, auditRingSize+10)
	}
	if after := a.newest(auditRingSize+8, 1000); len(after) != 2 || after[1].Seq != auditRingSize+9 {
		t.Fatalf("after: %+v", after)
	}
	if lim := a.newest(0, 3); len(lim) != 3 {
		t.Fatalf("limit: %d", len(lim))
	}
}
