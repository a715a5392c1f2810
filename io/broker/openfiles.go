package broker

// The open-files budget of the partitions. A loaded partition holds two
// descriptors for as long as it is loaded (its log's tail segment and its
// blob file; measured: 19,954 descriptors at 9,500 one-partition queues),
// and one it cannot open stops the broker (a storage failure is fatal), so
// the Node refuses a queue or stream whose partitions would not fit instead.
// Connections, reads of stored payloads, snapshots and the listeners share
// the rest: a connection the process cannot accept is retried by the
// listener, not fatal.
const (
	fdsPerPartition = 2
	// fdsReservedMin is kept out of the partitions' share, and at least a
	// tenth of the limit.
	fdsReservedMin = 1024
	// partitionsUnbounded is the budget when the limit is unknown or
	// unlimited (node.DefaultConfig's).
	partitionsUnbounded = 1 << 20
)

// PartitionsForOpenFiles is the partition budget under an open-files limit
// of limit descriptors (0 or less: unknown).
func PartitionsForOpenFiles(limit int64) int {
	if limit <= 0 || limit >= fdsPerPartition*partitionsUnbounded {
		return partitionsUnbounded
	}
	reserved := max(fdsReservedMin, limit/10)
	return int(max((limit-reserved)/fdsPerPartition, 1))
}
