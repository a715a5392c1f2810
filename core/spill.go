package core

// Payloads out of memory. The driver decides which payloads stay in memory;
// the core keeps the accounting and swaps a live message's body for a stored
// copy (Body.Ref) on request. Nothing here is an input: which bodies are in
// memory is a property of this process, not of the partition's state, so it
// is not logged and a replay may hold them differently. Invariants:
//   - store.residentBytes is the sum of len(Payload) over live messages;
//   - a spilled message's state, offsets, timers and tags are untouched:
//     only its body pointer changes, to a copy, so a delivery already
//     handed out keeps the body it was given.

// ResidentPayloadBytes is the sum of the payload bytes live messages hold in
// memory.
func (p *Partition) ResidentPayloadBytes() int64 { return p.store.residentBytes }

// SpillBody replaces the in-memory payload of the live message at offset by
// ref, where the driver's storage holds the same bytes durably. It returns
// the bytes given back, 0 when the message is settled or already stored.
func (p *Partition) SpillBody(offset uint64, ref PayloadRef) int64 {
	m := p.store.get(offset)
	if m == nil || m.body.IsStored() || len(m.body.Payload) == 0 {
		return 0
	}
	assertTrue(ref.Stored() && int(ref.LengthBytes) == len(m.body.Payload), "a spill names the payload's own bytes")
	stored := *m.body
	stored.Payload = nil
	stored.Ref = ref
	freed := int64(len(m.body.Payload))
	m.body = &stored
	p.store.residentBytes -= freed
	assertTrue(p.store.residentBytes >= 0, "resident payload bytes never go negative")
	return freed
}

// LowestStoredFile is the lowest Ref.File of a live stored body, so that the
// driver keeps every file from it on; ok is false when no body is stored.
// It scans the live set: call it with a snapshot, which costs as much.
func (p *Partition) LowestStoredFile() (file uint64, ok bool) {
	p.store.forEach(func(_ uint64, m *message) {
		if m.body.IsStored() && (!ok || m.body.Ref.File < file) {
			file, ok = m.body.Ref.File, true
		}
	})
	return file, ok
}
