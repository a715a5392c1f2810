package node

import (
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/transport/wire"
)

// Operator queue operations at the Host: inflight counts for a delete,
// the delete itself (subscribers told 20, later requests refused), purge
// and the operator's publish, each answered to the AdminAddr once durable.

func TestHostCountsInflightForADelete(t *testing.T) {
	hh := newHostHarness(t, testHostConfig(), testPartitionConfig("jobs"), DeclareSettings{})
	hh.subscribe(1, 5, 2)
	hh.publish(1, 0, "a")
	hh.publish(1, 0, "b")
	hh.publish(1, 0, "c")
	take[*Deliveries](hh)
	hh.deliver(NodeAddr(), &InflightQuery{Token: 4})
	got, to := take[*InflightCount](hh)
	if len(got) != 1 || got[0].Token != 4 || got[0].Inflight != 2 || to[0] != NodeAddr() {
		t.Fatalf("inflight count: %+v to %v", got, to)
	}
	if o := hh.h.Observe(); o.Counts.Ready != 1 || o.Counts.Inflight != 2 || o.Consumers != 1 || o.Published != 3 {
		t.Fatalf("observation: %+v", o)
	}
}

func TestHostDeletedEndsSubscriptionsWithTopicDeletedAndRefusesRequests(t *testing.T) {
	hh := newHostHarness(t, testHostConfig(), testPartitionConfig("jobs"), DeclareSettings{})
	hh.subscribe(1, 5, 2)
	hh.subscribe(2, 6, 2)
	take[*Response](hh)
	hh.deliver(NodeAddr(), &PartitionDeleted{})
	ended, to := take[*SubscriptionEnded](hh)
	if len(ended) != 2 || ended[0].SubID != 5 || to[0] != SessionAddr(1) || ended[1].SubID != 6 || to[1] != SessionAddr(2) {
		t.Fatalf("ended: %+v to %v", ended, to)
	}
	for _, e := range ended {
		if e.Code != wire.ReasonTopicDeleted {
			t.Fatalf("code %d, want 20 topic_deleted", e.Code)
		}
	}
	hh.publish(1, 9, "late")
	r, _ := take[*Response](hh)
	if len(r) != 1 || r[0].Token != 9 || r[0].Reply.Kind != core.ReplyError || !r[0].Reply.Err.Retryable() {
		t.Fatalf("a request to a deleted partition: %+v", r)
	}
	if hh.h.Partition().Live() != 0 {
		t.Fatal("a deleted partition took a publish")
	}
}

func TestHostPurgeAndAdminPublishAnswerOnceDurable(t *testing.T) {
	hh := newHostHarness(t, testHostConfig(), testPartitionConfig("jobs"), DeclareSettings{})
	hh.subscribe(1, 5, 1)
	hh.publish(1, 0, "held")
	hh.publish(1, 0, "r1")
	hh.publish(1, 0, "r2")
	take[*Deliveries](hh)
	hh.autoPersist = false
	// Relayed by the Node, as every operator purge and publish is.
	hh.deliver(NodeAddr(), &AdminPublish{ReplyTo: AdminAddr(3), Body: &core.Body{Payload: []byte("t"), Headers: []core.Header{{Key: "fibril.test", Value: "admin"}}}})
	if got, _ := take[*AdminPublished](hh); len(got) != 0 {
		t.Fatalf("answered before durable: %+v", got)
	}
	hh.persist()
	pub, to := take[*AdminPublished](hh)
	if len(pub) != 1 || pub[0].Err != nil || pub[0].Offset != 3 || to[0] != AdminAddr(3) {
		t.Fatalf("admin publish: %+v to %v", pub, to)
	}
	hh.deliver(NodeAddr(), &PurgeQueue{ReplyTo: AdminAddr(4)})
	hh.persist()
	purged, to := take[*Purged](hh)
	if len(purged) != 1 || purged[0].Count != 3 || to[0] != AdminAddr(4) {
		t.Fatalf("purged: %+v to %v", purged, to)
	}
	if c := hh.h.Observe().Counts; c.Ready != 0 || c.Inflight != 1 {
		t.Fatalf("after purge: %+v", c)
	}
}
