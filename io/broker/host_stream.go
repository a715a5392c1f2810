package broker

import (
	"errors"
	"fmt"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/core/stream"
	"github.com/fibril-go/fibril/io/logstore"
)

// Stream partitions on a runner (host.go): the same goroutine, log and
// Committer as a queue partition; what differs is the machine (a
// StreamHost) and that it reads its own log back for lagging subscribers.
// Invariants:
//   - a read runs on the Committer's writer, the only goroutine that may
//     touch the Log (ReadEntries keeps its cursor in the Log), and comes back
//     to the runner as a StreamReadDone with the read's Token: every read
//     asked for is answered once, or the runner halts;
//   - the read entries are handed over as ReadEntries returned them: their
//     payloads are resolved and owned by the answer;
//   - an index retention dropped meanwhile is the core's to handle (an
//     error it retries after, while its clamp moves the subscription on);
//     any other read failure is a damaged log: the broker stops, as for a
//     stored payload that cannot be read back (SPEC §7).

// streamReadBytesMax bounds the payload bytes one read returns (past its
// first entry): the core asks for a number of entries, and reads on from
// where a short read stopped.
const streamReadBytesMax = 4 << 20

// recoverStream rebuilds a stream partition from its log, or makes a new
// one for a log that holds nothing yet (its declare is logged in the
// StreamHost's first Ready).
func (b *Broker) recoverStream(req node.LoadRequest, rec logstore.Recovered) (partitionMachine, uint64, error) {
	var (
		p   *stream.Partition
		err error
	)
	if rec.Snapshot == nil && len(rec.Entries) == 0 {
		p, err = stream.NewPartition(req.StreamConfig, req.Stream)
	} else {
		p, err = stream.Load(req.StreamConfig, rec.Snapshot, rec.Entries)
	}
	if err != nil {
		return nil, 0, err
	}
	last := p.LastIndex()
	h, err := node.NewStreamHost(b.nodeCfg, p, req)
	if err != nil {
		return nil, 0, err
	}
	return h, last, nil
}

// startReads hands a Ready's reads to the Committer. False: storage has
// failed (the runner halts).
func (r *hostRunner) startReads(reads []node.StreamRead) bool {
	for _, rd := range reads {
		token := rd.Token
		err := r.committer.ReadEntries(rd.FromIndex, rd.MaxEntries, streamReadBytesMax, func(entries []core.Entry, err error) {
			r.readDone(token, entries, err)
		})
		if err != nil {
			r.b.fatal(fmt.Errorf("stream %s: storage refused a read: %w", r.id, err))
			return false
		}
	}
	return true
}

// readDone runs on the Committer's writer goroutine: it must not wait.
func (r *hostRunner) readDone(token uint64, entries []core.Entry, err error) {
	switch {
	case err == nil:
		r.b.metrics.streamEntriesRead.Add(uint64(len(entries)))
		r.push(&node.StreamReadDone{Token: token, Entries: entries})
	case errors.Is(err, logstore.ErrCompacted):
		r.push(&node.StreamReadDone{Token: token, Err: core.ErrStorageBehind})
	default:
		r.b.fatal(fmt.Errorf("stream %s: reading the log back: %w", r.id, err))
		r.halt()
	}
}
