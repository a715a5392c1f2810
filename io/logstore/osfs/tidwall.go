package osfs

import (
	"errors"
	"fmt"

	"github.com/fibril-go/fibril/storage/fsys"
	"github.com/tidwall/wal"
)

// The segment log over tidwall/wal. Invariants:
//   - every option storage does not vary is fixed here (fsys.SegmentLogOptions
//     says which), so simwal can reproduce them;
//   - tidwall's ErrCorrupt also wraps fsys.ErrSegmentCorrupt.

// OpenTidwall is fsys.OpenSegmentLog on tidwall/wal.
func OpenTidwall(dir string, opts fsys.SegmentLogOptions) (fsys.SegmentLog, error) {
	log, err := wal.Open(dir, &wal.Options{
		NoSync:           opts.NoSync,
		SegmentSize:      opts.SegmentSizeBytes,
		LogFormat:        wal.Binary,
		SegmentCacheSize: 1, // storage never reads through it; ClearCache drops a rolled segment
		NoCopy:           true,
		AllowEmpty:       true,
		DirPerms:         dirPerm,
		FilePerms:        filePerm,
	})
	if err != nil {
		return nil, wrapTidwall(err)
	}
	return &tidwallLog{log: log}, nil
}

func wrapTidwall(err error) error {
	if errors.Is(err, wal.ErrCorrupt) {
		return fmt.Errorf("%w: %w", fsys.ErrSegmentCorrupt, err)
	}
	return err
}

type tidwallLog struct{ log *wal.Log }

// tidwallBatch is a wal.Batch: Write copies into its reused buffer, as
// tidwall's own does, so the adapter adds no copy.
type tidwallBatch struct{ b wal.Batch }

func (b *tidwallBatch) Write(index uint64, data []byte) { b.b.Write(index, data) }
func (b *tidwallBatch) Clear()                          { b.b.Clear() }

func (t *tidwallLog) FirstIndex() (uint64, error) {
	i, err := t.log.FirstIndex()
	return i, wrapTidwall(err)
}

func (t *tidwallLog) LastIndex() (uint64, error) {
	i, err := t.log.LastIndex()
	return i, wrapTidwall(err)
}

func (t *tidwallLog) NewBatch() fsys.Batch { return &tidwallBatch{} }

func (t *tidwallLog) WriteBatch(b fsys.Batch) error {
	return wrapTidwall(t.log.WriteBatch(&b.(*tidwallBatch).b))
}

func (t *tidwallLog) Sync() error { return wrapTidwall(t.log.Sync()) }
func (t *tidwallLog) TruncateFront(index uint64) error {
	return wrapTidwall(t.log.TruncateFront(index))
}
func (t *tidwallLog) ClearCache() error { return wrapTidwall(t.log.ClearCache()) }
func (t *tidwallLog) Close() error      { return wrapTidwall(t.log.Close()) }
