// Package stream is the pure state machine of one stream partition
// (docs/streams.md is its contract; SPEC 5, PROTOCOL 5.11, 5.14, 7.5).
//
// Like core.Partition it does no I/O, reads no clock and starts nothing:
// the driver (the stream host in the node core, the simulator, tests) feeds
// inputs to Step and carries out the Ready it returns.
//
// Driver contract:
//   - A fresh partition: NewPartition(cfg, settings); its first Ready
//     persists EntryStreamDeclare at index 1. A restart: Load(cfg, snapshot,
//     entries) with storage's snapshot (nil if none) and every entry after it.
//   - Persist entries in order and report Persisted{UpToIndex} as they
//     become durable. Ephemeral-tier entries are written like the others;
//     only their confirms do not wait.
//   - Answer every Read with one ReadDone carrying its Token and the entries
//     from FromIndex on (at most MaxEntries, contiguous, bodies resolved), or
//     Err. A read of a subscription that ended may go unanswered.
//   - On Truncate: once the same Ready's Persist is handed over, save
//     Snapshot at UpToIndex and drop the entries up to it, then send
//     SnapshotDone{Index: UpToIndex}. After a restart, drop a SnapshotDone
//     the new partition never asked for.
//   - Credit a subscription's records once their frames are queued.
//   - SubIDs are the driver's, unique per partition for as long as it lives:
//     a late Credit of an ended subscription must not reach a new one.
//   - Send a Tick at NextWakeMs (0 = none).
//
// Glossary of inputs: Publish (append a record), Subscribe (open a
// subscription, durable by name or ephemeral by start), Unsubscribe, Ack
// (delivered offsets of a subscription; commits its cursor), Credit (window
// back), Persisted (durability), ReadDone (log entries for one
// subscription), Tick (time), SnapshotDone (storage applied a truncation).
//
// Glossary of effects: Persist (entries), Replies (core.Reply: published,
// subscribed, unsubscribed, error), Deliveries (records, tag = offset),
// Reads (log reads for lagging subscriptions), Truncate (retention), Notices
// (a subscription was clamped forward by retention), NextWakeMs.
package stream
