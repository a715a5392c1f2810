package checker

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// A history is what one simulated run recorded: a Meta header and a list of
// events in the order they happened. Invariants:
//   - Seq numbers are 1, 2, 3, ... in recording order; the simulator is one
//     thread, so Seq order is a total order consistent with causality, and the
//     checkers use it as time (AtMs is true simulated time, for humans);
//   - client events pair a call with at most one return by Op; an operation
//     without a return never got an answer (its outcome is unknown);
//   - node events report what the node did (deliveries, log entries,
//     durable settlements, crashes and recoveries) with the node's clock as
//     the core saw it (NowMs).

// Kind names an event. Stored in history files: append-only.
type Kind uint8

const (
	KindInvalid Kind = iota
	// Client side: calls and returns.
	KindPublishCall
	KindPublishReturn
	KindSubscribeCall
	KindSubscribeReturn
	KindUnsubscribeCall
	KindUnsubscribeReturn
	KindSettleCall   // one per tag of an ack or nack
	KindSettleReturn // one per tag
	KindDisconnect   // the client lost or dropped its connection
	// Node side.
	KindAccept   // a publish was appended to the log
	KindConfirm  // the node released a publish confirm (durable)
	KindDeliver  // the core handed a message to a subscription
	KindEntry    // a log entry that settles, requeues or releases a message
	KindSubEnd   // the node ended a subscription (unsubscribe or connection loss)
	KindSettled  // the core reported a durable final outcome
	KindCrash    // one partition's view of a node crash
	KindRecover  // one partition recovered from the log
	KindFinal    // end of run: one message's state read back from the log
	KindFault    // a fault was injected (for readers and the fault count)
	KindPhase    // the run changed phase (safety -> liveness -> final)
	KindDeadLock // liveness: the run ended with work left (Text says what)
	KindNote     // a remark for readers (restarts, heals)
	KindAbort    // the run stopped early: a core invariant or assertion broke (Text)
	// Appended for the node-core driver.
	KindSubStart      // node: a partition took a subscription (Sub, Prefetch, AutoAck)
	KindClientDeliver // client: a DELIVER frame reached the client (Sub, Tag, MsgID)
	// KindAttach: client: HELLO_OK arrived. Outcome names the resume outcome;
	// when the client presented a session that was authenticated, AtMs2 is
	// how long (true ms) since it lost that session's link and Index2 the
	// longest gap the run's grace surely covers (0: no claim).
	KindAttach
	// KindConnClosed: node: the broker learned that a client's connection
	// is gone (Client names the client).
	KindConnClosed
	// Appended for streams (DESIGN.md item 8; checker/streams.go). Node
	// events carry the stream partition (Part) and the core's clock.
	KindStreamPublishCall   // client: a PUBLISH to a stream (MsgID, Confirm)
	KindStreamPublishReturn // client: its PUBLISH_OK (Offset) or ERROR
	KindStreamRecord        // node: a record appended (Offset, Index, MsgID, Headers)
	KindStreamConfirm       // node: a publish confirm released (Offset)
	KindStreamSubStart      // node: a subscription taken (Sub, Offset = start, Text = durable name, Headers = filter, Index = next offset, Index2 = oldest)
	KindStreamSubEnd        // node: a subscription gone
	KindStreamDeliver       // node: a record handed to a subscription (Sub, Offset, MsgID)
	KindStreamNotice        // node: retention clamped a subscription (Sub, Offset = from, Index2 = to)
	KindStreamCommit        // node: a durable cursor committed (Text = name, Offset = next, Index); Trigger "recover": the cursor a recovery found (Index = the recovered last index)
	KindStreamRecover       // node: a stream partition recovered (Offset = next offset, Index = last index, Index2 = oldest)
	KindStreamClientSub     // client: SUBSCRIBE_OK of a stream subscription (Sub, Text = durable name)
	KindStreamClientDeliver // client: a stream DELIVER (Sub, Offset, Tag, MsgID)
	KindStreamFinal         // end of a drained run: a stream partition's next offset (Offset)
	// Appended for retention and the speculative flag (item 8).
	KindStreamTruncate     // node: retention asked storage to drop the log up to Index (Ready Snapshot of a StreamHost)
	KindStreamSnapshotDone // node: that truncation applied (Index = up-to index, Offset = the new oldest offset)
	KindStreamDurable      // node: the partition's durable index moved (Index), recorded before the step's deliveries
	// Appended for exclusive consumer groups (DESIGN.md item 7;
	// checker/cohorts.go). Member ids are in Text (8-4-4-4-12 hex).
	KindAssignment  // client: ASSIGNMENT_CHANGED (Conn, Part = the queue's partition 0, Index = generation, Text = member id, Assigned/Added/Revoked = queue partition numbers)
	KindCohortJoin  // node: a session asked its cohort to take an exclusive subscription (Part, Sub, Text = member id)
	KindCohortLeave // node: a session told its cohort an exclusive subscription ended (Part, Sub, Text = member id)
	KindSetOwner    // node: the Node named a partition's exclusive owner (Part, Sub = the owner, 0 = nobody; Index = generation)
	KindCohortFinal // client, end of run: a cohort member's state (Conn, Part = the queue's partition 0, Text = member id, Assigned = the partitions it is subscribed to, Ok = attached and subscribed to all of them)
	kindCount
)

var kindNames = [...]string{
	KindInvalid: "invalid", KindPublishCall: "publish_call", KindPublishReturn: "publish_return",
	KindSubscribeCall: "subscribe_call", KindSubscribeReturn: "subscribe_return",
	KindUnsubscribeCall: "unsubscribe_call", KindUnsubscribeReturn: "unsubscribe_return",
	KindSettleCall: "settle_call", KindSettleReturn: "settle_return", KindDisconnect: "disconnect",
	KindAccept: "accept", KindConfirm: "confirm", KindDeliver: "deliver", KindEntry: "entry",
	KindSubEnd: "sub_end", KindSettled: "settled", KindCrash: "crash", KindRecover: "recover",
	KindFinal: "final", KindFault: "fault", KindPhase: "phase", KindDeadLock: "stuck",
	KindNote: "note", KindAbort: "abort", KindSubStart: "sub_start", KindClientDeliver: "client_deliver", KindAttach: "attach", KindConnClosed: "conn_closed",
	KindStreamPublishCall: "stream_publish_call", KindStreamPublishReturn: "stream_publish_return",
	KindStreamRecord: "stream_record", KindStreamConfirm: "stream_confirm", KindStreamSubStart: "stream_sub_start",
	KindStreamSubEnd: "stream_sub_end", KindStreamDeliver: "stream_deliver", KindStreamNotice: "stream_notice",
	KindStreamCommit: "stream_commit", KindStreamRecover: "stream_recover", KindStreamClientSub: "stream_client_sub",
	KindStreamClientDeliver: "stream_client_deliver", KindStreamFinal: "stream_final",
	KindStreamTruncate: "stream_truncate", KindStreamSnapshotDone: "stream_snapshot_done", KindStreamDurable: "stream_durable",
	KindAssignment: "assignment", KindCohortJoin: "cohort_join", KindCohortLeave: "cohort_leave", KindSetOwner: "set_owner",
	KindCohortFinal: "cohort_final",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MarshalText writes the kind's name.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads a kind's name.
func (k *Kind) UnmarshalText(b []byte) error {
	for i, name := range kindNames {
		if name == string(b) {
			*k = Kind(i)
			return nil
		}
	}
	return fmt.Errorf("checker: unknown event kind %q", b)
}

// SettleAction is what a client asked of a delivery. Append-only.
type SettleAction uint8

const (
	ActionAck   SettleAction = 1
	ActionRetry SettleAction = 2 // nack requeue=true (optionally with NotBeforeMs)
	ActionFail  SettleAction = 3 // nack requeue=false
)

// Outcome is a message's state in a KindFinal event. Append-only.
const (
	OutcomeLive         = "live"
	OutcomePendingDLQ   = "pending_dlq"
	OutcomeAcked        = "acked"
	OutcomeDiscarded    = "discarded"
	OutcomeDeadLettered = "dead_lettered"
)

// Event is one line of a history. Fields unused by a kind stay zero and are
// left out of the JSON.
type Event struct {
	Seq  uint64 `json:"seq"`
	AtMs int64  `json:"at_ms"` // true simulated time since the run began
	Kind Kind   `json:"kind"`

	Node   uint32 `json:"node,omitempty"`
	Client uint32 `json:"client,omitempty"`
	// Conn names the client connection of an attach or a conn_closed (the
	// simulator's link id; 0 in older histories), so that the close of an
	// old connection reported after a resume on a new one is told apart.
	Conn uint64 `json:"conn,omitempty"`
	Op   uint64 `json:"op,omitempty"`   // client operation id (pairs call and return)
	Part int    `json:"part,omitempty"` // index into Meta.Partitions, +1 (0 = none)

	MsgID   uint64 `json:"msg_id,omitempty"`
	Offset  uint64 `json:"offset,omitempty"`
	Tag     uint64 `json:"tag,omitempty"`
	Sub     uint64 `json:"sub,omitempty"`
	Retries uint32 `json:"retries,omitempty"`
	Index   uint64 `json:"index,omitempty"`  // log index of the entry behind the event
	Index2  uint64 `json:"index2,omitempty"` // crash: synced index; recover: synced index at the crash
	NowMs   int64  `json:"now_ms,omitempty"` // node: the clock the core saw (its running maximum)
	Step    uint64 `json:"step,omitempty"`   // node step serial (deliveries in one step)

	// Publish and settle requests.
	Confirm     bool         `json:"confirm,omitempty"`
	HasTTL      bool         `json:"has_ttl,omitempty"`
	TTLMs       int64        `json:"ttl_ms,omitempty"`
	NotBeforeMs int64        `json:"not_before_ms,omitempty"`
	Prefetch    uint32       `json:"prefetch,omitempty"`
	AutoAck     bool         `json:"auto_ack,omitempty"`
	Action      SettleAction `json:"action,omitempty"`

	// Returns: Ok, or Err with the core error text.
	Ok  bool   `json:"ok,omitempty"`
	Err string `json:"err,omitempty"`

	// Log entries (KindEntry) and outcomes.
	EntryKind uint8  `json:"entry_kind,omitempty"` // core.EntryKind
	Cause     uint8  `json:"cause,omitempty"`      // requeue cause or dlq reason
	AtMs2     int64  `json:"at_ms2,omitempty"`     // entry AtMs (not_before, lease deadline)
	Trigger   string `json:"trigger,omitempty"`    // input kind of the step that wrote the entry
	Outcome   string `json:"outcome,omitempty"`    // settled / final outcome
	Reason    string `json:"reason,omitempty"`     // dlq reason name

	// Dead-letter copies: the stroma.dlq.* headers as delivered.
	Headers []Header `json:"headers,omitempty"`

	// Recovery: snapshot hashes of the recovered state and of the state
	// derived from the durable prefix of what was written.
	GotHash  string `json:"got_hash,omitempty"`
	WantHash string `json:"want_hash,omitempty"`

	Text string `json:"text,omitempty"` // faults, phases, notes

	// Streams: a record's payload bytes (KindStreamRecord; its publish time
	// is AtMs2); a delivery flagged speculative (node: the core's flag;
	// client: the DELIVER carried fibril.speculative: 1).
	Bytes       uint64 `json:"bytes,omitempty"`
	Speculative bool   `json:"speculative,omitempty"`

	// Cohorts (KindAssignment, KindCohortFinal): partition numbers within
	// the queue, sorted ascending.
	Assigned []uint32 `json:"assigned,omitempty"`
	Added    []uint32 `json:"added,omitempty"`
	Revoked  []uint32 `json:"revoked,omitempty"`
}

// Header is one message header (a copy of core.Header, kept here so the file
// format does not change when the core's does).
type Header struct {
	Key   string `json:"k"`
	Value string `json:"v"`
}

// QueueSpec describes one queue of the run, as the node declared it.
type QueueSpec struct {
	Topic        string `json:"topic"`
	Partitions   int    `json:"partitions"`
	MaxRetries   uint32 `json:"max_retries"`
	DLQKind      uint8  `json:"dlq_kind"`             // core.DLQPolicyKind
	DLQTarget    string `json:"dlq_target,omitempty"` // custom target topic
	DefaultTTLMs int64  `json:"default_ttl_ms,omitempty"`
	// DeadLetterSink marks a queue that receives dead-letter copies; clients
	// do not publish to it.
	DeadLetterSink bool `json:"dead_letter_sink,omitempty"`
	// Stream marks a plexus stream (Tier: core.Tier*); the queue fields
	// are unused.
	Stream bool  `json:"stream,omitempty"`
	Tier   uint8 `json:"tier,omitempty"`
	// A stream's retention bounds (0 = unbounded).
	MaxRecords uint64 `json:"max_records,omitempty"`
	MaxBytes   uint64 `json:"max_bytes,omitempty"`
	MaxAgeMs   uint64 `json:"max_age_ms,omitempty"`
	// Cohort is the consumer_group of the queue's exclusive members: only
	// they subscribe to it, and item 7 judges its partitions ("" = none).
	Cohort string `json:"cohort,omitempty"`
}

// PartitionSpec is one partition of one queue; events name it by index+1.
type PartitionSpec struct {
	Queue     int    `json:"queue"` // index into Meta.Queues
	Topic     string `json:"topic"`
	Partition uint32 `json:"partition"`
}

// Meta is the first line of a history file.
type Meta struct {
	Format      string          `json:"format"`
	Scenario    string          `json:"scenario"`
	Seed        uint64          `json:"seed"`
	Swarm       bool            `json:"swarm,omitempty"`
	Faults      string          `json:"faults"`
	LeaseMs     int64           `json:"lease_ms"`
	PrefetchMax uint32          `json:"prefetch_max"`
	GlobalDLQ   string          `json:"global_dlq,omitempty"`
	Queues      []QueueSpec     `json:"queues"`
	Partitions  []PartitionSpec `json:"partitions"`
	Replay      string          `json:"replay"` // the command that replays this run
	// ReconnectGraceMs is the brokers' reconnect grace (node-core runs).
	ReconnectGraceMs int64 `json:"reconnect_grace_ms,omitempty"`
	// StreamSegmentRecordsMax and StreamSegmentBytesMax seal a stream
	// segment (the brokers' stream partition config; 0 = not recorded, and
	// the retention checks of item 8 stay off).
	StreamSegmentRecordsMax uint64 `json:"stream_segment_records_max,omitempty"`
	StreamSegmentBytesMax   uint64 `json:"stream_segment_bytes_max,omitempty"`
}

// FormatVersion names the history file format.
const FormatVersion = "fibril-history-1"

// History is a run's recording.
type History struct {
	Meta   Meta
	Events []Event
}

// PartitionOf returns the spec of an event's partition.
func (h *History) PartitionOf(part int) PartitionSpec { return h.Meta.Partitions[part-1] }

// QueueOf returns the spec of an event's queue.
func (h *History) QueueOf(part int) QueueSpec {
	return h.Meta.Queues[h.Meta.Partitions[part-1].Queue]
}

// PartName names a partition for messages ("jobs/0").
func (h *History) PartName(part int) string {
	if part <= 0 || part > len(h.Meta.Partitions) {
		return "?"
	}
	p := h.Meta.Partitions[part-1]
	return fmt.Sprintf("%s/%d", p.Topic, p.Partition)
}

// WriteJSONL writes the history as JSON lines: Meta first, then each event.
func (h *History) WriteJSONL(w io.Writer) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	if err := enc.Encode(&h.Meta); err != nil {
		return err
	}
	for i := range h.Events {
		if err := enc.Encode(&h.Events[i]); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// WriteFile writes the history to path as JSON lines.
func (h *History) WriteFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := h.WriteJSONL(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ReadJSONL reads a history written by WriteJSONL.
func ReadJSONL(r io.Reader) (*History, error) {
	dec := json.NewDecoder(bufio.NewReader(r))
	h := &History{}
	if err := dec.Decode(&h.Meta); err != nil {
		return nil, fmt.Errorf("checker: reading meta: %w", err)
	}
	if h.Meta.Format != FormatVersion {
		return nil, fmt.Errorf("checker: format %q, want %q", h.Meta.Format, FormatVersion)
	}
	for {
		var e Event
		err := dec.Decode(&e)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("checker: reading event %d: %w", len(h.Events)+1, err)
		}
		h.Events = append(h.Events, e)
	}
	return h, h.validate()
}

// ReadFile reads a history file.
func ReadFile(path string) (*History, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadJSONL(f)
}

// validate checks what the checkers rely on: dense sequence numbers and
// partition references that resolve.
func (h *History) validate() error {
	for i := range h.Events {
		e := &h.Events[i]
		if e.Seq != uint64(i+1) {
			return fmt.Errorf("checker: event %d has seq %d", i+1, e.Seq)
		}
		if e.Part < 0 || e.Part > len(h.Meta.Partitions) {
			return fmt.Errorf("checker: event %d names partition %d of %d", e.Seq, e.Part, len(h.Meta.Partitions))
		}
		if e.Kind == KindInvalid || e.Kind >= kindCount {
			return fmt.Errorf("checker: event %d has kind %v", e.Seq, e.Kind)
		}
	}
	for _, p := range h.Meta.Partitions {
		if p.Queue < 0 || p.Queue >= len(h.Meta.Queues) {
			return fmt.Errorf("checker: partition %s/%d names queue %d", p.Topic, p.Partition, p.Queue)
		}
	}
	return nil
}

// Describe renders one event as a short line for reports.
func (h *History) Describe(e *Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d t=%dms %s", e.Seq, e.AtMs, e.Kind)
	if e.Part > 0 {
		fmt.Fprintf(&b, " %s", h.PartName(e.Part))
	}
	if e.Client != 0 {
		fmt.Fprintf(&b, " client=%d", e.Client)
	}
	if e.Op != 0 {
		fmt.Fprintf(&b, " op=%d", e.Op)
	}
	if e.MsgID != 0 {
		fmt.Fprintf(&b, " msg=%d", e.MsgID)
	}
	if e.Kind == KindDeliver || e.Kind == KindEntry || e.Kind == KindAccept || e.Kind == KindSettled || e.Kind == KindFinal || e.Kind == KindConfirm ||
		e.Kind >= KindStreamPublishReturn && e.Kind <= KindStreamDurable {
		fmt.Fprintf(&b, " offset=%d", e.Offset)
	}
	if e.Tag != 0 {
		fmt.Fprintf(&b, " tag=%d", e.Tag)
	}
	if e.Sub != 0 {
		fmt.Fprintf(&b, " sub=%d", e.Sub)
	}
	if e.Kind == KindDeliver || (e.Kind == KindEntry && e.Retries != 0) {
		fmt.Fprintf(&b, " retries=%d", e.Retries)
	}
	if e.Index != 0 {
		fmt.Fprintf(&b, " index=%d", e.Index)
	}
	if e.NowMs != 0 {
		fmt.Fprintf(&b, " now=%d", e.NowMs)
	}
	if e.Kind == KindEntry {
		fmt.Fprintf(&b, " entry=%s cause=%d trigger=%s", EntryKindName(e.EntryKind), e.Cause, e.Trigger)
	}
	if e.NotBeforeMs != 0 {
		fmt.Fprintf(&b, " not_before=%d", e.NotBeforeMs)
	}
	if e.HasTTL {
		fmt.Fprintf(&b, " ttl=%dms", e.TTLMs)
	}
	if e.Action != 0 {
		fmt.Fprintf(&b, " action=%d", e.Action)
	}
	if e.Ok {
		b.WriteString(" ok")
	}
	if e.Err != "" {
		fmt.Fprintf(&b, " err=%q", e.Err)
	}
	if e.Outcome != "" {
		fmt.Fprintf(&b, " outcome=%s", e.Outcome)
	}
	if e.Reason != "" {
		fmt.Fprintf(&b, " reason=%s", e.Reason)
	}
	if e.Kind == KindAssignment || e.Kind == KindCohortFinal {
		fmt.Fprintf(&b, " assigned=%v added=%v revoked=%v", e.Assigned, e.Added, e.Revoked)
	}
	if e.Text != "" {
		fmt.Fprintf(&b, " %s", e.Text)
	}
	return b.String()
}
