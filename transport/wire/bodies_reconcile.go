package wire

// Bodies of RECONCILE_CLIENT, RECONCILE_SERVER and RECONCILE_RESULT (PROTOCOL.md
// §5.17 to §5.19, rules in §7.8).
//
// Invariants:
//   - reconcile_sub has auto_ack *before* prefetch, unlike SUBSCRIBE.
//   - RECONCILE_RESULT's tail of N u16 reason codes is a trailing optional: when the
//     payload ends after the entries every code is 0 (unspecified). A partial tail is
//     truncation. The encoder always writes the tail.
//   - ReconcilePolicy and ReconcileAction are u8 wire enums, append-only; unknown
//     values are decode errors. Reason codes are open and preserved.

// ReconcilePolicy is RECONCILE_CLIENT's policy byte. Append-only u8 wire enum.
type ReconcilePolicy uint8

const (
	ReconcileConservative ReconcilePolicy = 0
	ReconcileRestore      ReconcilePolicy = 1 // the Go client's default
)

// ReconcileAction is what a RECONCILE_RESULT entry tells the client to do.
// Append-only u8 wire enum.
type ReconcileAction uint8

const (
	ReconcileKeep               ReconcileAction = 0
	ReconcileCloseClientSide    ReconcileAction = 1
	ReconcileCloseServerSide    ReconcileAction = 2
	ReconcileRecreateClientSide ReconcileAction = 3
)

// ReconcileSub is the wire reconcile_sub: one queue subscription as one side sees it.
type ReconcileSub struct {
	SubID          uint64 // the client's current id (client view) or the broker's
	Topic          string
	Partition      uint32
	Group          Optional[string]
	AutoAck        bool
	Prefetch       uint32
	ConsumerGroup  Optional[string]
	ConsumerTarget Optional[uint32]
	MemberID       Optional[UUID]
}

// QueueKey returns the (topic, partition, group) the broker matches entries by.
func (s ReconcileSub) QueueKey() QueueKey {
	return QueueKey{Topic: s.Topic, Partition: s.Partition, Group: s.Group}
}

// reconcileSubBytesMin: u64 + empty str + u32 + absent group + bool + u32 + 3 absent.
const reconcileSubBytesMin = 8 + 4 + 4 + 1 + 1 + 4 + 1 + 1 + 1

func appendReconcileSub(dst []byte, s ReconcileSub) []byte {
	dst = appendU64(dst, s.SubID)
	dst = appendStr(dst, s.Topic)
	dst = appendU32(dst, s.Partition)
	dst = appendOpt(dst, s.Group, appendStr)
	dst = appendBool(dst, s.AutoAck)
	dst = appendU32(dst, s.Prefetch)
	dst = appendOpt(dst, s.ConsumerGroup, appendStr)
	dst = appendOpt(dst, s.ConsumerTarget, appendU32)
	return appendOpt(dst, s.MemberID, appendUUID)
}

func (d *decoder) reconcileSub(string) ReconcileSub {
	var s ReconcileSub
	s.SubID = d.u64("sub.sub_id")
	s.Topic = d.str("sub.topic")
	s.Partition = d.u32("sub.partition")
	s.Group = decodeOpt(d, "sub.group", (*decoder).str)
	s.AutoAck = d.boolean("sub.auto_ack")
	s.Prefetch = d.u32("sub.prefetch")
	s.ConsumerGroup = decodeOpt(d, "sub.consumer_group", (*decoder).str)
	s.ConsumerTarget = decodeOpt(d, "sub.consumer_target", (*decoder).u32)
	s.MemberID = decodeOpt(d, "sub.member_id", (*decoder).uuid)
	return s
}

// ReconcileClient is RECONCILE_CLIENT (opcode 70, C→B, FRC1): the queue subscriptions
// a reconnecting client remembers, under its old sub ids.
type ReconcileClient struct {
	Policy        ReconcilePolicy
	Subscriptions []ReconcileSub
}

func (m ReconcileClient) AppendTo(dst []byte) []byte {
	dst = append(dst, magicReconcileClient...)
	dst = appendU8(dst, uint8(m.Policy))
	return appendList(dst, m.Subscriptions, appendReconcileSub)
}

// DecodeReconcileClient strictly decodes a RECONCILE_CLIENT payload.
func DecodeReconcileClient(b []byte) (ReconcileClient, error) {
	d := decoder{b: b, magic: magicReconcileClient}
	d.checkMagic()
	var m ReconcileClient
	m.Policy = ReconcilePolicy(d.enumU8("policy", uint8(ReconcileRestore)))
	m.Subscriptions = decodeList(&d, "subscriptions", reconcileSubBytesMin, (*decoder).reconcileSub)
	return finish(&d, m)
}

// ReconcileServer is RECONCILE_SERVER (opcode 71, B→C, FRS1). Defined and supported
// by the codec, but Fibril never sends it and clients ignore it.
type ReconcileServer struct {
	Subscriptions []ReconcileSub
}

func (m ReconcileServer) AppendTo(dst []byte) []byte {
	dst = append(dst, magicReconcileServer...)
	return appendList(dst, m.Subscriptions, appendReconcileSub)
}

// DecodeReconcileServer strictly decodes a RECONCILE_SERVER payload.
func DecodeReconcileServer(b []byte) (ReconcileServer, error) {
	d := decoder{b: b, magic: magicReconcileServer}
	d.checkMagic()
	var m ReconcileServer
	m.Subscriptions = decodeList(&d, "subscriptions", reconcileSubBytesMin, (*decoder).reconcileSub)
	return finish(&d, m)
}

// ReconcileEntry is one row of RECONCILE_RESULT. Code travels in the trailing tail on
// the wire but belongs to its row, so it lives here.
type ReconcileEntry struct {
	Client Optional[ReconcileSub] // set in every row but close_server_side ones
	Server Optional[ReconcileSub] // set whenever the server side exists
	Action ReconcileAction
	Reason string     // free text, e.g. "server_missing"
	Code   ReasonCode // 0 when the tail was absent
}

// reconcileEntryBytesMin: two absent options, the action byte and an empty reason.
const reconcileEntryBytesMin = 1 + 1 + 1 + 4

// ReconcileResult is RECONCILE_RESULT (opcode 72, B→C, FRR1).
type ReconcileResult struct {
	Entries []ReconcileEntry
}

func (m ReconcileResult) AppendTo(dst []byte) []byte {
	dst = append(dst, magicReconcileResult...)
	dst = appendLen(dst, len(m.Entries))
	for _, e := range m.Entries {
		dst = appendOpt(dst, e.Client, appendReconcileSub)
		dst = appendOpt(dst, e.Server, appendReconcileSub)
		dst = appendU8(dst, uint8(e.Action))
		dst = appendStr(dst, e.Reason)
	}
	for _, e := range m.Entries {
		dst = appendU16(dst, uint16(e.Code))
	}
	return dst
}

// DecodeReconcileResult strictly decodes a RECONCILE_RESULT payload; the tail of
// reason codes may be wholly absent.
func DecodeReconcileResult(b []byte) (ReconcileResult, error) {
	d := decoder{b: b, magic: magicReconcileResult}
	d.checkMagic()
	var m ReconcileResult
	if n := d.count("entries", reconcileEntryBytesMin); n > 0 {
		m.Entries = make([]ReconcileEntry, n)
	}
	for i := range m.Entries {
		e := &m.Entries[i]
		e.Client = decodeOpt(&d, "client", (*decoder).reconcileSub)
		e.Server = decodeOpt(&d, "server", (*decoder).reconcileSub)
		e.Action = ReconcileAction(d.enumU8("action", uint8(ReconcileRecreateClientSide)))
		e.Reason = d.str("reason")
	}
	if !d.atEnd() {
		for i := range m.Entries {
			m.Entries[i].Code = ReasonCode(d.u16("code"))
		}
	}
	return finish(&d, m)
}
