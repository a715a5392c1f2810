package core

// Messages and the store that holds them. Invariants:
//   - offsets are dense per partition, assigned at publish from nextOffset;
//   - a slot is live (body != nil) from its Publish entry until the entry that
//     settles it; a settled offset never becomes live again, so the settled
//     set is the complement of the live set below nextOffset and the
//     settled_until frontier (the lowest live offset) only grows;
//   - each live message is in exactly one state, and only an inflight message
//     has a tag and a lease deadline.

// Header is one user header. A slice keeps wire order and avoids map-order
// effects in anything derived from it.
type Header struct {
	Key   string
	Value string
}

// ContentKind is the wire content type kind (PROTOCOL.md §2.1). Append-only.
type ContentKind uint8

const (
	ContentNone ContentKind = iota
	ContentMsgpack
	ContentJSON
	ContentText
	ContentCustom
)

// ContentType is a content kind, with its MIME string when custom.
type ContentType struct {
	Kind   ContentKind
	Custom string
}

// Body is what a producer published, plus the broker's receive stamp. The core
// takes ownership on publish and never mutates it afterwards, so deliveries
// share it.
//
// A body is stored when Ref is set (Ref.Stored()): its payload is then not in
// memory (Payload is nil) but in the driver's storage at Ref, and whoever
// needs the bytes (a delivery, a dead-letter copy) reads them from there. The
// core never reads a payload, so it treats both kinds alike; a stored body
// comes from SpillBody or from recovery.
type Body struct {
	Payload     []byte
	Headers     []Header
	ContentType ContentType
	PublishedMs int64 // producer clock, echoed as is
	ReceivedMs  int64 // broker clock at publish, stamped by the core
	Ref         PayloadRef
}

// PayloadRef says where the driver's storage keeps a payload that is not in
// memory. The core only carries it (and writes it into snapshots); its
// meaning is the driver's.
type PayloadRef struct {
	File        uint64
	OffsetBytes uint64
	LengthBytes uint32 // > 0 for a stored payload (empty payloads are never stored)
	Checksum    uint32
}

// Stored says whether the ref names a stored payload.
func (r PayloadRef) Stored() bool { return r.LengthBytes > 0 }

// IsStored says whether the body's payload is in storage rather than memory.
func (b *Body) IsStored() bool { return b.Ref.Stored() }

// msgState is a live message's state. Stored in snapshots: append-only.
type msgState uint8

const (
	stateReady      msgState = 1 // deliverable now
	stateDelayed    msgState = 2 // waiting for dueMs (delayed publish or retry-after)
	stateInflight   msgState = 3 // leased until dueMs
	statePendingDLQ msgState = 4 // settled here once the dead-letter copy is stored
)

// message is one live message: 48 bytes plus its shared Body.
type message struct {
	body        *Body
	expiresAtMs int64  // TTL deadline, 0 = never
	dueMs       int64  // delayed: not_before; inflight: lease deadline
	tag         uint64 // inflight: current delivery tag
	subID       uint64 // inflight: owning subscription, 0 when unknown (after recovery)
	retries     uint32
	state       msgState
	reason      DLQReason // pendingDLQ: why
}

// chunkShift sizes chunks at 64 messages: big enough that the map of chunks
// costs little per message, small enough that one stuck message pins at most
// 63 settled slots.
const (
	chunkShift = 6
	chunkSize  = 1 << chunkShift
	chunkMask  = chunkSize - 1
	// chunkFreeListMax bounds the chunks kept for reuse.
	chunkFreeListMax = 64
)

type chunk struct {
	live  int
	slots [chunkSize]message
}

// messageStore maps offsets to live messages. Chunks whose messages are all
// settled are released, so memory follows the live set, not the offset range.
type messageStore struct {
	chunks   map[uint64]*chunk
	tailKey  uint64
	tail     *chunk // cache of the chunk publishes go to
	live     int
	freeList []*chunk
	// residentBytes sums the in-memory payloads of live messages (stored
	// bodies count nothing): what SpillBody can give back.
	residentBytes int64
}

func newMessageStore() messageStore {
	return messageStore{chunks: make(map[uint64]*chunk)}
}

func (s *messageStore) get(offset uint64) *message {
	key := offset >> chunkShift
	c := s.tail
	if c == nil || key != s.tailKey {
		c = s.chunks[key]
		if c == nil {
			return nil
		}
	}
	m := &c.slots[offset&chunkMask]
	if m.body == nil {
		return nil
	}
	return m
}

// insert makes offset live and returns its zeroed slot.
func (s *messageStore) insert(offset uint64, body *Body) *message {
	assertTrue(body != nil, "a live message has a body")
	key := offset >> chunkShift
	c := s.tail
	if c == nil || key != s.tailKey {
		c = s.chunks[key]
		if c == nil {
			c = s.newChunk()
			s.chunks[key] = c
		}
		s.tail, s.tailKey = c, key
	}
	m := &c.slots[offset&chunkMask]
	assertTrue(m.body == nil, "an offset is published once")
	*m = message{body: body}
	c.live++
	s.live++
	s.residentBytes += int64(len(body.Payload))
	return m
}

// remove settles offset: its slot is cleared and its chunk released when empty.
func (s *messageStore) remove(offset uint64) {
	key := offset >> chunkShift
	c := s.chunks[key]
	assertTrue(c != nil, "removed offset has a chunk")
	m := &c.slots[offset&chunkMask]
	assertTrue(m.body != nil, "removed offset is live")
	s.residentBytes -= int64(len(m.body.Payload))
	assertTrue(s.residentBytes >= 0, "resident payload bytes never go negative")
	*m = message{}
	c.live--
	s.live--
	if c.live == 0 {
		delete(s.chunks, key)
		if s.tail == c {
			s.tail = nil
		}
		if len(s.freeList) < chunkFreeListMax {
			s.freeList = append(s.freeList, c)
		}
	}
}

func (s *messageStore) newChunk() *chunk {
	if n := len(s.freeList); n > 0 {
		c := s.freeList[n-1]
		s.freeList = s.freeList[:n-1]
		return c // slots were zeroed one by one in remove
	}
	return new(chunk)
}

// sortedChunkKeys lists chunk keys in offset order, for deterministic scans.
func (s *messageStore) sortedChunkKeys() []uint64 {
	keys := make([]uint64, 0, len(s.chunks))
	for k := range s.chunks {
		keys = append(keys, k)
	}
	sortUint64s(keys)
	return keys
}

// forEach visits live messages in offset order.
func (s *messageStore) forEach(visit func(offset uint64, m *message)) {
	for _, key := range s.sortedChunkKeys() {
		c := s.chunks[key]
		for i := range c.slots {
			if c.slots[i].body != nil {
				visit(key<<chunkShift|uint64(i), &c.slots[i])
			}
		}
	}
}

// lowestLive returns the lowest live offset, or ok=false when none is live.
func (s *messageStore) lowestLive() (uint64, bool) {
	if s.live == 0 {
		return 0, false
	}
	first := true
	var lowKey uint64
	for k := range s.chunks {
		if first || k < lowKey {
			lowKey, first = k, false
		}
	}
	c := s.chunks[lowKey]
	for i := range c.slots {
		if c.slots[i].body != nil {
			return lowKey<<chunkShift | uint64(i), true
		}
	}
	panic("fibril/core invariant violated: a chunk in the map has a live slot")
}
