package stream

import "github.com/fibril-go/fibril/core"

// Ready is the batch of effects of one Step, in contract order:
//  1. Persist: append these entries to the log (contiguous indexes, after
//     all earlier ones); report durability with Persisted.
//  2. Truncate: once the Persist entries are handed over, save Snapshot at
//     UpToIndex and drop the entries up to it; report with SnapshotDone.
//  3. Reads: read the log for a subscription; answer with ReadDone.
//  4. Deliveries, Replies, Notices: send now. Publish confirms that promise
//     durability are already gated on Persisted.
//  5. NextWakeMs: send a Tick no later than this (0 = nothing scheduled).
//
// A Ready and everything it points to is valid until the next Step; the
// driver copies what it keeps.
type Ready struct {
	Persist    []core.Entry
	Replies    []core.Reply
	Deliveries []Delivery
	Reads      []Read
	Truncate   *Truncate
	Notices    []Notice
	NextWakeMs int64
}

// Delivery hands record Offset to subscription SubID (delivery_tag = Offset).
type Delivery struct {
	SubID  uint64
	Offset uint64
	Body   *core.Body
	AtMs   int64
	// Speculative: not yet durable at hand-out (speculative tier only); the
	// session adds header fibril.speculative: 1.
	Speculative bool
}

// Read asks the driver for at most MaxEntries log entries from FromIndex on,
// for subscription SubID; the answer is ReadDone with the same Token.
type Read struct {
	SubID      uint64
	Token      uint64
	FromIndex  uint64
	MaxEntries int
}

// Truncate asks storage to save Snapshot at UpToIndex and drop the entries
// up to it (storage.Log.SaveSnapshot), then send SnapshotDone{UpToIndex}.
type Truncate struct {
	UpToIndex uint64
	Snapshot  []byte
}

// NoticeKind says what a Notice reports. Append-only.
type NoticeKind uint8

// NoticeClamped: retention dropped records the subscription had not reached;
// it moved From -> To (the oldest retained offset).
const NoticeClamped NoticeKind = 1

// Notice tells a session something about its subscription that has no reply
// (the session counts and logs it; the wire has no frame for it).
type Notice struct {
	SubID uint64
	Kind  NoticeKind
	From  uint64
	To    uint64
}

func (rd *Ready) reset() {
	for i := range rd.Persist {
		rd.Persist[i] = core.Entry{} // drop references to bodies
	}
	for i := range rd.Deliveries {
		rd.Deliveries[i].Body = nil
	}
	rd.Persist = rd.Persist[:0]
	rd.Replies = rd.Replies[:0]
	rd.Deliveries = rd.Deliveries[:0]
	rd.Reads = rd.Reads[:0]
	rd.Truncate = nil
	rd.Notices = rd.Notices[:0]
	rd.NextWakeMs = 0
}
