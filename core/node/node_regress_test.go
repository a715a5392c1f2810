package node

import (
	"testing"
)

// Regression tests for review findings on the Node machine (each failed
// before its fix).

// An identical re-declare must not be answered while the record of the
// declare it repeats is not durable: a crash would take the settings back
// after the client was told they hold.
func TestNodeRedeclareWaitsForTheRecordItRepeats(t *testing.T) {
	h := newNodeHarness(t, testNodeConfig())
	h.deliver(SessionAddr(1), &DeclareQueue{Token: 1, Topic: "q", PartitionCount: 1})
	h.autoPersist = false
	e := h.deliver(SessionAddr(1), &DeclareQueue{Token: 2, Topic: "q", PartitionCount: 1, MaxRetries: u32(3)})
	if d, _ := envelopesOf[*Declared](e); len(d) != 0 {
		t.Fatalf("the changing declare was answered before durable: %+v", d)
	}
	e = h.deliver(SessionAddr(2), &DeclareQueue{Token: 3, Topic: "q", PartitionCount: 1, MaxRetries: u32(3)})
	if d, _ := envelopesOf[*Declared](e); len(d) != 0 {
		t.Fatalf("the repeat (token %d) was answered while the record it repeats is not durable (durable %d, last %d)",
			d[0].Token, h.durable, h.log[len(h.log)-1].Index)
	}
	// Once durable both are answered, in arrival order.
	d, to := envelopesOf[*Declared](h.persist())
	if len(d) != 2 || d[0].Token != 2 || d[1].Token != 3 || to[1] != SessionAddr(2) {
		t.Fatalf("answers once durable: %+v to %v", d, to)
	}
	// And with everything durable, a repeat is answered at once.
	e = h.deliver(SessionAddr(2), &DeclareQueue{Token: 4, Topic: "q", MaxRetries: u32(3)})
	if d, _ := envelopesOf[*Declared](e); len(d) != 1 || len(e.persist) != 0 {
		t.Fatalf("a repeat of a durable declare: %+v, %d records", d, len(e.persist))
	}
}
