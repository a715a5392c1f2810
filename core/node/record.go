package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/fibril-go/fibril/core"
)

// The Node's own log: records and snapshots. Invariants:
//   - the Node's durable state (boot counter, owner id, session id
//     reservation, catalogue, session skeletons) is a function of its records alone: apply is the only place
//     it changes, for the live Node and for NewNode's replay alike, so a
//     recovered Node holds exactly what the live one held at that index;
//   - every record is self-describing (magic, format version, kind) and its
//     decoder is strict: a record that does not decode whole, or carries a
//     value no encoder writes (a bad name, a zero partition count), is an
//     error, never skipped. Storage frames each record with a CRC; a record
//     that passes the CRC and still fails here is a bug or a foreign file,
//     and the driver refuses to start rather than forget queues (the old
//     JSON catalogue forgot every queue after one bad line);
//   - encoding is deterministic (maps are written in sorted order), so equal
//     states give equal snapshot bytes.

// recordKind names a record. Stored on disk: append-only, never renumber.
type recordKind uint8

const (
	recordBoot            recordKind = 1 // boot counter and owner id
	recordQueue           recordKind = 2 // one catalogue entry, whole; the last one of a queue wins
	recordSkeleton        recordKind = 3 // one session skeleton, whole; the last one of a client id wins
	recordSkeletonRemoved recordKind = 4 // a skeleton is forgotten
	recordSessionIDs      recordKind = 5 // session ids up to a ceiling may be handed out
	// recordStream declares a stream (topic, settings); written once per
	// stream (settings never change). Older logs have none and still load.
	recordStream recordKind = 6
	// recordRuntime holds the whole set of runtime settings and its version;
	// recordGlobalDLQ the global dead-letter target and its version
	// (runtime.go). Numbered apart from the kinds above so that kinds other
	// work adds meanwhile do not collide.
	recordRuntime   recordKind = 16
	recordGlobalDLQ recordKind = 17
)

const (
	// recordMagic opens every record, snapshotMagic the snapshot: they catch
	// a reader pointed at the wrong bytes.
	recordMagic = 0xFD
	// recordVersion is the format of the record bodies below; a reader
	// refuses versions it does not know rather than guess.
	recordVersion = 1
	// snapshotVersion 2 adds the session id ceiling after the owner id;
	// version 1 snapshots (ceiling 0) stay readable.
	// snapshotVersion 3 adds the stream list after the skeletons; versions
	// 1 and 2 (no streams) stay readable.
	// snapshotVersion 4 adds the runtime settings and the global
	// dead-letter target after the streams; versions 1-3 stay readable.
	snapshotVersion   = 4
	snapshotVersionV3 = 3
	snapshotVersionV2 = 2
	snapshotVersionV1 = 1
	// bootTagShift leaves 2^40 delivery tags per partition and boot
	// (io/broker's bootTagShift): TagFloor = boot << bootTagShift.
	bootTagShift = 40
	// bootMax: the boot counter must leave TagFloor inside 64 bits.
	// 2^24 boots: a broker restarting every second would take months to run
	// out, and decodeRecord refuses a counter past it rather than wrap.
	bootMax = 1<<(64-bootTagShift) - 1
)

var snapshotMagic = [4]byte{'F', 'N', 'S', '1'}

// ErrCorruptRecord reports a Node record or snapshot that does not decode.
var ErrCorruptRecord = errors.New("node: corrupt record")

// queueKey names a queue (all its partitions). Group is normalised.
type queueKey struct {
	Topic string
	Group string
}

// catalogSettings are a queue's declared settings; a nil field was never
// declared and keeps the partition's default.
type catalogSettings struct {
	DLQ          *core.DLQPolicy
	MaxRetries   *uint32
	DefaultTTLMs *int64
}

// catalogEntry is one declared queue.
type catalogEntry struct {
	key        queueKey
	partitions uint32
	settings   catalogSettings
	// evicted is volatile, never encoded: one bit per partition evicted
	// idle in this process and not loaded since (node_idle.go), so the
	// reload counter is exact at one bit per partition.
	evicted []uint64
}

// streamEntry is one declared stream: a topic (no group) and its settings,
// which never change once recorded.
type streamEntry struct {
	topic    string
	settings core.StreamSettings
}

// skeleton is what survives a restart of a session (PROTOCOL 7.7): its
// identity and its queue subscriptions.
type skeleton struct {
	clientID  [16]byte
	token     [16]byte
	savedAtMs int64
	subs      []SkeletonSub
}

// record is one decoded record: exactly one of its pointer fields is set,
// matching kind (removed for recordSkeletonRemoved).
type record struct {
	kind     recordKind
	boot     uint64
	ownerID  [16]byte
	queue    *catalogEntry
	skeleton *skeleton
	removed  [16]byte
	// sessionIDCeiling: recordSessionIDs.
	sessionIDCeiling uint64
	stream           *streamEntry // recordStream
	// queueKey: recordQueueRemoved, recordQueueDataGone (record_queueops.go).
	queueKey *queueKey
	// recordRuntime: the version and the whole set; recordGlobalDLQ: the
	// version and the target (nil: none).
	runtimeVersion   uint64
	runtime          *RuntimeSettings
	globalDLQVersion uint64
	globalDLQ        *core.DLQTarget
}

// durableState is what the Node's log builds.
type durableState struct {
	lastIndex uint64
	boot      uint64
	ownerID   [16]byte
	// sessionIDCeiling: every session id ever handed out is at or below it
	// (a process hands out only ids its reservation record made durable).
	sessionIDCeiling uint64
	queues           map[queueKey]*catalogEntry
	skeletons        map[[16]byte]*skeleton
	// partitionsTotal sums the partitions of every queue and stream in the
	// catalogue (derived in addQueue, addStream and the removal), for
	// PartitionsMax.
	partitionsTotal int
	// streams: declared streams by topic. queueTopics counts the queues
	// (all groups) of each topic, derived in apply: a topic is a queue or
	// a stream, never both.
	streams     map[string]*streamEntry
	queueTopics map[string]int
	// tombstones: removed queues whose data may still be on disk
	// (record_queueops.go); never in a snapshot.
	tombstones map[queueKey]bool
	// runtime is the runtime settings in force (nil before the first
	// boot's seed record) and runtimeVersion their version;
	// globalDLQVersion counts the global target's changes (0: never set).
	runtimeVersion   uint64
	runtime          *RuntimeSettings
	globalDLQVersion uint64
	globalDLQ        *core.DLQTarget
}

func newDurableState() durableState {
	return durableState{queues: map[queueKey]*catalogEntry{}, skeletons: map[[16]byte]*skeleton{},
		streams: map[string]*streamEntry{}, queueTopics: map[string]int{}, tombstones: map[queueKey]bool{}}
}

// addQueue files a queue entry (apply and snapshot decoding alike).
func (s *durableState) addQueue(e *catalogEntry) {
	if old := s.queues[e.key]; old == nil {
		s.queueTopics[e.key.Topic]++
		s.partitionsTotal += int(e.partitions)
	} else {
		s.partitionsTotal += int(e.partitions) - int(old.partitions)
	}
	s.queues[e.key] = e
}

// addStream files a stream entry (apply and snapshot decoding alike).
func (s *durableState) addStream(e *streamEntry) {
	if old := s.streams[e.topic]; old != nil {
		s.partitionsTotal -= int(old.settings.PartitionCount)
	}
	s.partitionsTotal += int(e.settings.PartitionCount)
	s.streams[e.topic] = e
}

// apply is the only place durable state changes.
func (s *durableState) apply(index uint64, r *record) {
	assertHold(index == s.lastIndex+1, "node records are applied in contiguous index order")
	// A gap or a repeat would mean a record was lost or replayed twice, and the
	// replayed state would silently differ from the live one; there is no way to
	// recover from that here, so it is a bug, not an error.
	s.lastIndex = index
	switch r.kind {
	case recordBoot:
		// A boot counter that went back would hand out a TagFloor already used by an
		// earlier process, so a stale ACK could settle a new delivery.
		assertHold(r.boot > s.boot, "the boot counter only grows")
		s.boot, s.ownerID = r.boot, r.ownerID
	case recordQueue:
		// Partition count is fixed at first declare: messages are already placed by
		// the partition-key hash (PROTOCOL 2.2), and a new count would route the same
		// key elsewhere and break per-key order.
		if old := s.queues[r.queue.key]; old != nil {
			assertHold(old.partitions == r.queue.partitions, "a queue's partition count never changes")
		}
		assertHold(s.streams[r.queue.key.Topic] == nil, "a topic is a queue or a stream, never both")
		e := *r.queue
		s.addQueue(&e)
		delete(s.tombstones, e.key) // re-created only once its old data was gone
	case recordSkeleton:
		// Copied: the record's slice may be the envelope's or the decoder's.
		sk := *r.skeleton
		sk.subs = slices.Clone(sk.subs)
		s.skeletons[sk.clientID] = &sk
	case recordSkeletonRemoved:
		// Removal is idempotent: a skeleton dropped twice (an expiry racing an end)
		// replays the same as once.
		delete(s.skeletons, r.removed)
	case recordSessionIDs:
		// A shrinking ceiling would let a restarted process reissue an id some old
		// session already held.
		assertHold(r.sessionIDCeiling > s.sessionIDCeiling, "the session id ceiling only grows")
		s.sessionIDCeiling = r.sessionIDCeiling
	case recordStream:
		// Settings never change: a re-declare with others is refused, not
		// recorded, so a second record can only repeat the first.
		if old := s.streams[r.stream.topic]; old != nil {
			assertHold(old.settings == r.stream.settings, "a stream's settings never change")
		}
		assertHold(s.queueTopics[r.stream.topic] == 0, "a topic is a queue or a stream, never both")
		e := *r.stream
		s.addStream(&e)
	case recordQueueRemoved, recordQueueDataGone:
		s.applyQueueRemoval(r)
	case recordRuntime, recordGlobalDLQ:
		s.applyRuntime(r) // runtime_state.go
	default:
		// decodeRecord refuses unknown kinds, so one here was built in memory wrong.
		panic("fibril/core/node invariant violated: applying an unknown record kind")
	}
}

// ---- encoding
//
// Record layout, big-endian, after the magic 0xFD, the version (1) and the
// kind byte:
//
//	boot              u64 boot, [16]byte owner id
//	queue             str topic, str group, u32 partitions,
//	                  opt{u8 policy, str target topic, str target group},
//	                  opt{u32 max retries}, opt{u64 default TTL ms}
//	skeleton          [16]byte client id, [16]byte token, u64 saved at ms,
//	                  u32 n, n x {str topic, str group, u32 partition,
//	                  u32 prefetch, u8 auto-ack}
//	skeleton removed  [16]byte client id
//	session ids       u64 ceiling
//	stream            str topic, u8 tier, u64 max age ms, u64 max bytes,
//	                  u64 max records, u32 partition count
//
// str is a u32 length and UTF-8 bytes; opt is a presence byte (0 or 1) and,
// when 1, the value. The snapshot is "FNS1", the version, u64 last index,
// u64 boot, [16]byte owner id, u64 session id ceiling (version 2 only),
// u32 n and n queues, u32 m and m skeletons, u32 k and k streams (version 3
// only, as stream records), each list in sorted order. A new field or kind means a new version or
// kind: old logs must stay readable, so nothing is ever renumbered.

// appendRecord encodes r after dst.
func appendRecord(dst []byte, r *record) []byte {
	// Every record repeats magic and version so that any single record can be
	// validated on its own, without the snapshot or the record before it.
	dst = append(dst, recordMagic, recordVersion, byte(r.kind))
	switch r.kind {
	case recordBoot:
		dst = binary.BigEndian.AppendUint64(dst, r.boot)
		dst = append(dst, r.ownerID[:]...)
	case recordQueue:
		dst = appendCatalogEntry(dst, r.queue)
	case recordSkeleton:
		dst = appendSkeleton(dst, r.skeleton)
	case recordSkeletonRemoved:
		dst = append(dst, r.removed[:]...)
	case recordSessionIDs:
		dst = binary.BigEndian.AppendUint64(dst, r.sessionIDCeiling)
	case recordStream:
		dst = appendStreamEntry(dst, r.stream)
	case recordQueueRemoved, recordQueueDataGone:
		dst = appendQueueKey(dst, *r.queueKey)
	case recordRuntime:
		dst = appendRuntime(dst, r.runtimeVersion, r.runtime)
	case recordGlobalDLQ:
		dst = appendGlobalDLQ(dst, r.globalDLQVersion, r.globalDLQ)
	default:
		panic("fibril/core/node invariant violated: encoding an unknown record kind")
	}
	return dst
}

// appendString writes a u32 length and the bytes.
func appendString(dst []byte, s string) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}

// appendCatalogEntry writes one whole queue entry: a queue record carries
// the merged state, not the declare's patch, so the last record of a queue
// is all a replay needs of it.
func appendCatalogEntry(dst []byte, e *catalogEntry) []byte {
	// Field order here is the on-disk contract mirrored by decoder.catalogEntry:
	// reorder one and every existing log misreads.
	dst = appendString(dst, e.key.Topic)
	dst = appendString(dst, e.key.Group)
	dst = binary.BigEndian.AppendUint32(dst, e.partitions)
	// Presence bytes keep "never declared" (nil) distinct from a declared zero
	// value, so a replay keeps the partition default rather than forcing zero.
	if e.settings.DLQ == nil {
		dst = append(dst, 0)
	} else {
		dst = append(dst, 1, byte(e.settings.DLQ.Kind))
		dst = appendString(dst, e.settings.DLQ.Target.Topic)
		dst = appendString(dst, e.settings.DLQ.Target.Group)
	}
	if e.settings.MaxRetries == nil {
		dst = append(dst, 0)
	} else {
		dst = append(dst, 1)
		dst = binary.BigEndian.AppendUint32(dst, *e.settings.MaxRetries)
	}
	if e.settings.DefaultTTLMs == nil {
		return append(dst, 0)
	}
	dst = append(dst, 1)
	return binary.BigEndian.AppendUint64(dst, uint64(*e.settings.DefaultTTLMs))
}

// appendStreamEntry writes one stream: its topic and its settings.
func appendStreamEntry(dst []byte, e *streamEntry) []byte {
	dst = appendString(dst, e.topic)
	return core.AppendStreamSettings(dst, &e.settings)
}

// appendSkeleton writes one whole skeleton (the last one of a client id
// wins, as for queues).
func appendSkeleton(dst []byte, sk *skeleton) []byte {
	// The token is stored so a client can resume across a broker restart
	// (PROTOCOL 7.7) with the token it was handed before the crash.
	dst = append(dst, sk.clientID[:]...)
	dst = append(dst, sk.token[:]...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(sk.savedAtMs))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(sk.subs)))
	for _, sub := range sk.subs {
		dst = appendString(dst, sub.Queue.Topic)
		dst = appendString(dst, sub.Queue.Group)
		dst = binary.BigEndian.AppendUint32(dst, sub.Queue.Partition)
		dst = binary.BigEndian.AppendUint32(dst, sub.Prefetch)
		autoAck := byte(0)
		if sub.AutoAck {
			autoAck = 1
		}
		dst = append(dst, autoAck)
	}
	return dst
}

// appendSnapshot encodes the whole durable state, maps in sorted order.
func appendSnapshot(dst []byte, s *durableState) []byte {
	dst = append(dst, snapshotMagic[:]...)
	dst = append(dst, snapshotVersion)
	dst = binary.BigEndian.AppendUint64(dst, s.lastIndex)
	dst = binary.BigEndian.AppendUint64(dst, s.boot)
	dst = append(dst, s.ownerID[:]...)
	// Always written at the current version; decodeSnapshot still reads V1.
	dst = binary.BigEndian.AppendUint64(dst, s.sessionIDCeiling)
	// Sorted so that two replicas, or a replay and the live Node, produce
	// byte-identical snapshots that the simulator can compare.
	keys := sortedQueueKeys(s.queues)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(keys)))
	for _, k := range keys {
		dst = appendCatalogEntry(dst, s.queues[k])
	}
	ids := sortedClientIDs(s.skeletons)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(ids)))
	for _, id := range ids {
		dst = appendSkeleton(dst, s.skeletons[id])
	}
	topics := sortedStreamTopics(s.streams)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(topics)))
	for _, t := range topics {
		dst = appendStreamEntry(dst, s.streams[t])
	}
	return appendRuntimeSnapshot(dst, s) // runtime_state.go
}

// sortedStreamTopics lists the declared streams' topics in order.
func sortedStreamTopics(m map[string]*streamEntry) []string {
	topics := make([]string, 0, len(m))
	for t := range m {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	return topics
}

// sortedQueueKeys lists a catalogue's keys by topic, then group: map order
// must never reach an encoding or an effect.
func sortedQueueKeys(m map[queueKey]*catalogEntry) []queueKey {
	keys := make([]queueKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareQueueKeys)
	return keys
}

// compareQueueKeys orders queue keys by topic, then group.
func compareQueueKeys(a, b queueKey) int {
	switch {
	case a.Topic < b.Topic:
		return -1
	case a.Topic > b.Topic:
		return 1
	case a.Group < b.Group:
		return -1
	case a.Group > b.Group:
		return 1
	}
	return 0
}

// sortedClientIDs lists skeleton client ids in byte order.
func sortedClientIDs(m map[[16]byte]*skeleton) [][16]byte {
	ids := make([][16]byte, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b [16]byte) int { return compareBytes(a[:], b[:]) })
	return ids
}

// compareBytes is bytes.Compare, kept here so that the encoding's order is
// spelled out next to it.
func compareBytes(a, b []byte) int {
	// Lexicographic on the raw bytes: a length tie-break keeps the order total.
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return len(a) - len(b)
}

// ---- decoding

// decodeRecord decodes one record that fills b exactly.
func decodeRecord(b []byte) (*record, error) {
	// Magic, then version: a record of a future format is refused by name
	// rather than misread as this one.
	d := decoder{b: b}
	// The frame's CRC has already passed: every failure below is a record this
	// code did not write, and the caller refuses to start rather than skip it.
	if d.u8() != recordMagic {
		return nil, fmt.Errorf("%w: bad magic", ErrCorruptRecord)
	}
	if v := d.u8(); v != recordVersion {
		return nil, fmt.Errorf("%w: unknown format version %d", ErrCorruptRecord, v)
	}
	r := &record{kind: recordKind(d.u8())}
	switch r.kind {
	case recordBoot:
		r.boot = d.u64()
		d.fill(r.ownerID[:])
		// Boot 0 is never written (the first boot is 1), and a counter past
		// bootMax would overflow the tag floor.
		if r.boot == 0 || r.boot > bootMax {
			d.fail("boot counter out of range")
		}
	case recordQueue:
		r.queue = d.catalogEntry()
	case recordSkeleton:
		r.skeleton = d.skeleton()
	case recordSkeletonRemoved:
		d.fill(r.removed[:])
	case recordSessionIDs:
		// Zero is never reserved (ids start at 1), and past sessionSeqMax the ids
		// would no longer fit their encoding.
		r.sessionIDCeiling = d.u64()
		if r.sessionIDCeiling == 0 || r.sessionIDCeiling > sessionSeqMax {
			d.fail("session id ceiling out of range")
		}
	case recordStream:
		r.stream = d.streamEntry()
	case recordQueueRemoved, recordQueueDataGone:
		k := d.queueName()
		r.queueKey = &k
	case recordRuntime:
		r.runtimeVersion, r.runtime = d.runtime()
	case recordGlobalDLQ:
		r.globalDLQVersion, r.globalDLQ = d.globalDLQ()
		if d.err == nil && r.globalDLQVersion == 0 {
			d.fail("global dead-letter target version 0")
		}
	default:
		// Unknown kinds are refused, not skipped: a skipped record could be a queue,
		// and forgetting a queue loses its data on the next declare.
		return nil, fmt.Errorf("%w: unknown record kind %d", ErrCorruptRecord, r.kind)
	}
	// Trailing bytes mean the layout is not the one we think it is.
	if err := d.finish(); err != nil {
		return nil, err
	}
	return r, nil
}

// decodeSnapshot decodes a snapshot that fills b exactly.
func decodeSnapshot(b []byte) (durableState, error) {
	s := newDurableState()
	d := decoder{b: b}
	var magic [4]byte
	d.fill(magic[:])
	if magic != snapshotMagic {
		return s, fmt.Errorf("%w: bad snapshot magic", ErrCorruptRecord)
	}
	version := d.u8()
	// V1 stays readable so an upgrade can boot from an old snapshot.
	if version != snapshotVersion && version != snapshotVersionV3 && version != snapshotVersionV2 && version != snapshotVersionV1 {
		return s, fmt.Errorf("%w: unknown snapshot version %d", ErrCorruptRecord, version)
	}
	s.lastIndex = d.u64()
	s.boot = d.u64()
	d.fill(s.ownerID[:])
	// V1 snapshots predate id reservation: ceiling 0, and the first Boot reserves.
	if version >= snapshotVersionV2 {
		s.sessionIDCeiling = d.u64()
	}
	// Each list is checked whole: a queue or skeleton listed twice means the
	// bytes are not a snapshot this code wrote.
	count := d.count(9) // a queue entry takes at least 9 bytes
	for i := uint32(0); i < count && d.err == nil; i++ {
		e := d.catalogEntry()
		if _, dup := s.queues[e.key]; dup {
			d.fail("a queue listed twice")
		}
		// A snapshot holds the merged entry per queue, so a duplicate has no
		// meaning to choose between; refusing it beats picking one at random.
		s.addQueue(e)
	}
	// 44 = client id (16), token (16), saved-at (8) and the sub count (4).
	count = d.count(44) // a skeleton takes at least 44 bytes
	for i := uint32(0); i < count && d.err == nil; i++ {
		sk := d.skeleton()
		if _, dup := s.skeletons[sk.clientID]; dup {
			d.fail("a skeleton listed twice")
		}
		s.skeletons[sk.clientID] = sk
	}
	// Version 3 lists the streams; older snapshots have none.
	if version >= snapshotVersionV3 {
		count = d.count(33) // a stream takes at least 33 bytes (empty topic + settings)
		for i := uint32(0); i < count && d.err == nil; i++ {
			e := d.streamEntry()
			if _, dup := s.streams[e.topic]; dup {
				d.fail("a stream listed twice")
			}
			if s.queueTopics[e.topic] > 0 {
				d.fail("a topic listed as a queue and a stream")
			}
			s.addStream(e)
		}
	}
	// Version 4 carries the runtime settings and the global target.
	if version >= snapshotVersion {
		decodeRuntimeSnapshot(&d, &s) // runtime_state.go
	}
	// Checked after the lists so one pass reports the first problem; d.fail keeps
	// only the first reason anyway.
	if s.boot > bootMax {
		d.fail("boot counter out of range")
	}
	if s.sessionIDCeiling > sessionSeqMax {
		d.fail("session id ceiling out of range")
	}
	return s, d.finish()
}

// decoder reads big-endian fields; the first failure sticks and later
// reads yield zeroes, so callers check once at the end.
type decoder struct {
	b   []byte
	err error
}

// fail records the first reason the record is corrupt.
func (d *decoder) fail(why string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorruptRecord, why)
	}
}

// take consumes n bytes, or fails when fewer remain.
func (d *decoder) take(n int) []byte {
	// Once failed, every read yields nothing, so a corrupt length cannot steer
	// later reads into reading garbage as fields.
	if d.err != nil || n < 0 || len(d.b) < n {
		d.fail("short record")
		return nil
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

// fill copies the next len(dst) bytes into dst (identities).
func (d *decoder) fill(dst []byte) {
	if b := d.take(len(dst)); b != nil {
		copy(dst, b)
	}
}

// u8, u32 and u64 read big-endian integers (zero once failed).
func (d *decoder) u8() uint8 {
	if b := d.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if b := d.take(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if b := d.take(8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

// count reads a count of items each at least minBytes long, refusing one the
// remaining bytes cannot hold: never allocate from an untrusted count.
func (d *decoder) count(minBytes int) uint32 {
	n := d.u32()
	// uint64 products cannot overflow for u32 counts and small minBytes; a
	// corrupt count of 2^32 would otherwise drive a huge loop or allocation.
	if uint64(n)*uint64(minBytes) > uint64(len(d.b)) {
		d.fail("count larger than the record")
		return 0
	}
	return n
}

// str reads a u32 length and that many bytes of valid UTF-8; the length is
// checked against what remains before anything is allocated.
func (d *decoder) str() string {
	n := d.u32()
	if uint64(n) > uint64(len(d.b)) {
		d.fail("string longer than the record")
		return ""
	}
	s := string(d.take(int(n)))
	// Names go back out in frames, where str must be valid UTF-8 (PROTOCOL 2).
	if !utf8.ValidString(s) {
		d.fail("invalid UTF-8")
	}
	return s
}

// flag reads a presence byte: 0 or 1, anything else is corrupt (so a
// flipped bit is not read as a present field).
func (d *decoder) flag() bool {
	switch d.u8() {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail("bad presence flag")
	return false
}

// queueName reads a topic and a group and checks them as a declare would.
func (d *decoder) queueName() queueKey {
	k := queueKey{Topic: d.str(), Group: d.str()}
	// A name the declare path would have refused means the bytes are not ours;
	// letting it in would create a queue no client can name.
	if d.err == nil && validQueueKey(k) != nil {
		d.fail(fmt.Sprintf("invalid queue name %q/%q", k.Topic, k.Group))
	}
	return k
}

// catalogEntry reads and checks one queue entry as a declare would have
// accepted it: a valid name, at least one partition, a known policy whose
// target is valid when custom and absent otherwise, a TTL not negative.
func (d *decoder) catalogEntry() *catalogEntry {
	e := &catalogEntry{key: d.queueName(), partitions: d.u32()}
	// Zero partitions would make every route divide by zero.
	if d.err == nil && e.partitions == 0 {
		d.fail("a queue with no partitions")
	}
	if d.flag() {
		p := &core.DLQPolicy{Kind: core.DLQPolicyKind(d.u8())}
		p.Target = core.DLQTarget{Topic: d.str(), Group: d.str()}
		switch {
		// DLQ kinds are a wire enum: append-only, so an unknown one is from a newer
		// writer or a flipped bit, and either way not something to act on.
		case p.Kind > core.DLQCustom:
			d.fail("unknown dead-letter policy")
		// A custom policy with a bad target would route dead letters nowhere.
		case p.Kind == core.DLQCustom && validQueueKey(queueKey(p.Target)) != nil:
			d.fail("invalid dead-letter target")
		case p.Kind != core.DLQCustom && p.Target != (core.DLQTarget{}):
			d.fail("a target on a policy that has none")
		}
		e.settings.DLQ = p
	}
	if d.flag() {
		v := d.u32()
		e.settings.MaxRetries = &v
	}
	if d.flag() {
		v := int64(d.u64())
		// A negative TTL would expire every message on arrival.
		if v < 0 {
			d.fail("negative default TTL")
		}
		e.settings.DefaultTTLMs = &v
	}
	return e
}

// streamEntry reads and checks one stream as a declare would have accepted
// it: a valid topic, a known tier, at least one partition.
func (d *decoder) streamEntry() *streamEntry {
	e := &streamEntry{topic: d.str()}
	if d.err == nil && core.ValidateName(e.topic) != nil {
		d.fail(fmt.Sprintf("invalid stream topic %q", e.topic))
	}
	if d.err != nil {
		return e
	}
	settings, rest, err := core.DecodeStreamSettings(d.b)
	if err != nil {
		d.fail("short stream settings")
		return e
	}
	d.b = rest
	if settings.Tier > core.TierDurable || settings.PartitionCount == 0 {
		d.fail("invalid stream settings")
	}
	e.settings = settings
	return e
}

// skeleton reads one skeleton; its subscription count is bounded by what
// remains of the record.
func (d *decoder) skeleton() *skeleton {
	sk := &skeleton{}
	d.fill(sk.clientID[:])
	d.fill(sk.token[:])
	// savedAtMs bounds resume after a restart (PROTOCOL 7.7): a skeleton older
	// than ResumeRestartTTLMs is refused on resume and swept, never revived.
	sk.savedAtMs = int64(d.u64())
	// 17 = two empty strings (4+4), partition (4), prefetch (4), auto-ack (1).
	n := d.count(17) // a subscription takes at least 17 bytes
	for i := uint32(0); i < n && d.err == nil; i++ {
		k := d.queueName()
		sub := SkeletonSub{Queue: core.QueueID{Topic: k.Topic, Group: k.Group, Partition: d.u32()}, Prefetch: d.u32()}
		sub.AutoAck = d.flag()
		sk.subs = append(sk.subs, sub)
	}
	return sk
}

// finish reports the first failure, or trailing bytes: a record fills its
// frame exactly.
func (d *decoder) finish() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	return d.err
}

// validQueueKey checks a queue's names (SPEC 1); Group must be normalised.
func validQueueKey(k queueKey) error {
	if err := core.ValidateName(k.Topic); err != nil {
		return err
	}
	if k.Group != "" {
		// "default" and "" name the same group; storing one spelling
		// keeps a queue from being catalogued twice under two keys.
		if k.Group == "default" {
			return core.ErrInvalidName // "default" is stored as ""
		}
		return core.ValidateName(k.Group)
	}
	return nil
}

// assertTrue panics with why when cond is false: a bug, never an input.
func assertHold(cond bool, why string) {
	if !cond {
		panic("fibril/core/node invariant violated: " + why)
	}
}
