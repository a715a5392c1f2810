package sim

import (
	"github.com/fibril-go/fibril/checker"
	"github.com/fibril-go/fibril/core"
)

// The simulated client protocol: what travels in one packet between a client
// and a node. It mirrors the real protocol's requests (publish, subscribe,
// unsubscribe, ack/nack) and pushes (replies, deliveries) without its byte
// encoding, which transport/ owns and tests separately.

type msgKind uint8

const (
	msgHello msgKind = iota + 1
	msgHelloOk
	msgPublish
	msgSubscribe
	msgUnsubscribe
	msgSettle
	msgReply
	msgDelivery
)

// message is one request or push. Fields unused by a kind stay zero.
type message struct {
	kind msgKind
	op   uint64 // client operation id, echoed in replies
	part int    // partition index in the world's catalogue

	// Publish.
	msgID       uint64
	body        *core.Body
	confirm     bool
	hasTTL      bool
	ttlMs       int64
	notBeforeMs int64

	// Subscribe, unsubscribe, settle.
	sub      uint64
	prefetch uint32
	autoAck  bool
	tags     []uint64
	action   checker.SettleAction

	// Replies.
	ok        bool
	errText   string
	offset    uint64
	staleTags []uint64

	// Deliveries.
	delivery core.Delivery
}
