package broker

import (
	"fmt"
	"sync"

	"github.com/fibril-go/fibril/core/node"
)

// The Node's own log (catalogue, identities, boot counter, skeletons),
// written by one goroutine. Invariants:
//   - records reach storage in the order the Node produced them, and each
//     batch is synced before Persisted reports it: a DECLARE_QUEUE_OK is
//     released only for a durable catalogue record;
//   - a snapshot is saved only once every record up to its index is
//     durable (the Node may ask ahead of durability);
//   - a write or sync failure stops the broker (fatal) and the writer:
//     nothing is reported durable after it.

// recordLog is what the driver needs of the Node's log storage
// (logstore.OpenRecordLog).
type recordLog interface {
	Append(records []node.Record) error
	Sync() error
	SaveSnapshot(index uint64, data []byte) error
	LastIndex() uint64
	Close() error
}

// recoveredRecords is what opening the log gave back: the newest snapshot
// (nil: none) and the records after it, in index order.
type recoveredRecords struct {
	Snapshot      []byte
	SnapshotIndex uint64
	Records       []node.Record
}

// nodeLogBatchRecordsMax bounds one Append: a burst of declares or
// skeleton changes is written in batches, each synced once.
const nodeLogBatchRecordsMax = 4096

type nodeLog struct {
	b  *Broker
	rl recordLog

	mu       sync.Mutex
	wake     sync.Cond
	pending  []node.Record
	snap     *node.SnapshotRequest
	closing  bool
	failed   bool
	done     chan struct{}
	durable  uint64 // writer only
	lastSent uint64 // the last index submitted
}

func newNodeLog(b *Broker, rl recordLog) *nodeLog {
	l := &nodeLog{b: b, rl: rl, done: make(chan struct{}), durable: rl.LastIndex(), lastSent: rl.LastIndex()}
	l.wake.L = &l.mu
	go l.run()
	return l
}

// submit copies records (a Ready is valid only until the next step) and
// queues them for the writer.
func (l *nodeLog) submit(records []node.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, rec := range records {
		assertTrue(rec.Index == l.lastSent+1, "node records are contiguous")
		l.lastSent = rec.Index
		l.pending = append(l.pending, node.Record{Index: rec.Index, Data: append([]byte(nil), rec.Data...)})
	}
	l.wake.Signal()
}

// snapshot queues a snapshot request; a newer one replaces a waiting one.
func (l *nodeLog) snapshot(req node.SnapshotRequest) {
	l.mu.Lock()
	defer l.mu.Unlock()
	assertTrue(req.Index <= l.lastSent, "a snapshot covers only submitted records")
	req.Data = append([]byte(nil), req.Data...)
	l.snap = &req
	l.wake.Signal()
}

func (l *nodeLog) run() {
	defer close(l.done)
	for {
		l.mu.Lock()
		for len(l.pending) == 0 && l.snap == nil && !l.closing {
			l.wake.Wait()
		}
		if len(l.pending) == 0 && l.snap == nil {
			l.mu.Unlock()
			return // closing, everything written
		}
		n := min(len(l.pending), nodeLogBatchRecordsMax)
		batch := append([]node.Record(nil), l.pending[:n]...)
		l.pending = append(l.pending[:0], l.pending[n:]...)
		var snap *node.SnapshotRequest
		if l.snap != nil && (len(batch) == 0 || l.snap.Index <= batch[len(batch)-1].Index || l.snap.Index <= l.durable) {
			snap, l.snap = l.snap, nil
		}
		l.mu.Unlock()
		if err := l.write(batch, snap); err != nil {
			l.b.fatal(fmt.Errorf("node log: %w", err))
			l.mu.Lock()
			l.failed, l.pending, l.snap = true, nil, nil
			l.mu.Unlock()
			return
		}
	}
}

// write appends and syncs one batch, reports it, then saves the snapshot
// that came with it.
func (l *nodeLog) write(batch []node.Record, snap *node.SnapshotRequest) error {
	if len(batch) > 0 {
		if err := l.rl.Append(batch); err != nil {
			return err
		}
		if err := l.rl.Sync(); err != nil {
			return err
		}
		l.durable = batch[len(batch)-1].Index
		assertTrue(l.rl.LastIndex() == l.durable, "the log ends at the batch just synced")
		l.b.pushDetached(l.b.nodeActor, &node.Persisted{UpToIndex: l.durable})
	}
	if snap != nil {
		assertTrue(snap.Index <= l.durable, "a snapshot is saved over durable records only")
		err := l.rl.SaveSnapshot(snap.Index, snap.Data)
		l.b.pushDetached(l.b.nodeActor, &node.SnapshotDone{Index: snap.Index, Err: err})
	}
	return nil
}

// close writes what is queued and closes the log.
func (l *nodeLog) close() error {
	l.mu.Lock()
	l.closing = true
	l.wake.Signal()
	l.mu.Unlock()
	<-l.done
	return l.rl.Close()
}
