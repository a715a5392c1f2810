package broker

import (
	"github.com/fibril-go/fibril/core/node"
	"github.com/fibril-go/fibril/io/logstore"
)

// The Node's log on disk is logstore's record log (storage.RecordLog over
// the OS: CRC-framed records on tidwall segments, torn-tail repair,
// corruption refusal, snapshots with front truncation). This adapter only
// converts node.Record to storage.Record and back. Invariant: indexes and
// bytes pass through unchanged, in order.

type diskRecordLog struct {
	rl  *logstore.RecordLog
	buf []logstore.Record
}

func openRecordLog(dir string) (recordLog, recoveredRecords, error) {
	rl, rec, err := logstore.OpenRecordLog(dir)
	if err != nil {
		return nil, recoveredRecords{}, err
	}
	out := recoveredRecords{Snapshot: rec.Snapshot, SnapshotIndex: rec.SnapshotIndex, Records: make([]node.Record, len(rec.Records))}
	for i, r := range rec.Records {
		out.Records[i] = node.Record{Index: r.Index, Data: r.Data}
	}
	assertTrue(len(out.Records) == 0 || out.Records[0].Index == rec.SnapshotIndex+1, "recovered records follow the snapshot")
	return &diskRecordLog{rl: rl}, out, nil
}

func (d *diskRecordLog) Append(records []node.Record) error {
	d.buf = d.buf[:0]
	for _, r := range records {
		d.buf = append(d.buf, logstore.Record{Index: r.Index, Data: r.Data})
	}
	err := d.rl.Append(d.buf)
	clear(d.buf) // the records' bytes belong to the caller
	return err
}

func (d *diskRecordLog) Sync() error { return d.rl.Sync() }
func (d *diskRecordLog) SaveSnapshot(index uint64, data []byte) error {
	return d.rl.SaveSnapshot(index, data)
}
func (d *diskRecordLog) LastIndex() uint64 { return d.rl.LastIndex() }
func (d *diskRecordLog) Close() error      { return d.rl.Close() }
