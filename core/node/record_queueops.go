package node

// Queue removal in the Node's log (issue 12: POST /admin/api/queues/delete).
// Invariants:
//   - a queue leaves the catalogue by one record (recordQueueRemoved), and
//     from that record on its key carries a tombstone: its partitions' data
//     may still be on disk, and the driver must delete it before anything
//     of that name loads again; the tombstone goes with recordQueueDataGone
//     (the driver reported the data deleted) or with a later queue record of
//     the same key (a queue record is durable only after the data was gone:
//     re-creation waits for the tombstone to clear);
//   - so a crash leaves a queue whole (no removal record durable: its data
//     is untouched, the driver deletes only after the removal is durable) or
//     gone (removal durable: its catalogue entry is gone, and a restarted
//     Node asks for the deletion again, RemoveRequest, before any load);
//   - tombstones are not in the snapshot format: the Node takes no snapshot
//     while one exists (maybeSnapshot), so every tombstone is in the records
//     after the last snapshot, and a recovered Node finds it.

const (
	// recordQueueRemoved removes a queue from the catalogue and leaves a
	// tombstone on its key. Stored on disk: never renumber.
	recordQueueRemoved recordKind = 7
	// recordQueueDataGone clears the tombstone: the data is deleted.
	recordQueueDataGone recordKind = 8
)

// appendQueueKey writes a queue key (both removal kinds carry only it).
func appendQueueKey(dst []byte, k queueKey) []byte {
	dst = appendString(dst, k.Topic)
	return appendString(dst, k.Group)
}

// applyQueueRemoval applies either removal kind.
func (s *durableState) applyQueueRemoval(r *record) {
	switch r.kind {
	case recordQueueRemoved:
		assertHold(s.queues[*r.queueKey] != nil, "a removed queue was in the catalogue")
		s.partitionsTotal -= int(s.queues[*r.queueKey].partitions)
		delete(s.queues, *r.queueKey)
		s.queueTopics[r.queueKey.Topic]--
		if s.queueTopics[r.queueKey.Topic] == 0 {
			delete(s.queueTopics, r.queueKey.Topic)
		}
		s.tombstones[*r.queueKey] = true
	case recordQueueDataGone:
		// Idempotent: the driver may report a deletion twice (a restart
		// asked again before the first report was durable).
		delete(s.tombstones, *r.queueKey)
	}
	assertHold(s.queues[*r.queueKey] == nil, "a removed queue is out of the catalogue")
}

// checkRemovalApplicable refuses a removal of a queue the log never had.
func checkRemovalApplicable(s *durableState, r *record) bool {
	return r.kind != recordQueueRemoved || s.queues[*r.queueKey] != nil
}
