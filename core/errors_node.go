package core

// Protocol outcomes decided by the node core (core/node) around the
// partitions: the catalogue, partition loading and dead-letter routing.
// Like every sentinel here, each has a stable wire code (PROTOCOL.md §6.1).
var (
	ErrPartitionOutOfRange = newError(CodeInvalid, false, "partition out of range for this queue")
	ErrTooManyPartitions   = newError(CodeInvalid, false, "partition_count exceeds the broker's PartitionsPerQueueMax")
	ErrTooManyQueues       = newError(CodeInternal, true, "too many queues: see the broker's QueuesMax")
	// ErrPartitionBudget refuses a queue or stream whose partitions would
	// take the broker past the partitions it can hold open: each holds open
	// files, and storage that cannot open a file stops the broker.
	ErrPartitionBudget     = newError(CodeInternal, false, "too many partitions on this broker: each holds open files; delete queues or raise its open-files limit (ulimit -n)")
	ErrPartitionLoadFailed = newError(CodeInternal, true, "the queue partition failed to load; retry later")
	// ErrCatalogBehind refuses a declare or a new queue while too many of
	// the node's records await fsync (backpressure, as ErrStorageBehind).
	ErrCatalogBehind = newError(CodeInternal, true, "storage is behind: too many catalogue records await fsync; retry later")
	// ErrDeadLetterBacklog refuses a dead-letter copy while too many wait to
	// be routed; the source partition tries again after a backoff.
	ErrDeadLetterBacklog = newError(CodeInternal, true, "too many dead-letter copies waiting to be routed; retried later")
	// ErrDeadLetterUnresolved refuses a dead-letter copy whose payload is
	// still a storage reference: the driver reads it back first.
	ErrDeadLetterUnresolved = newError(CodeInternal, true, "dead-letter copy without its payload; retried later")
)

// Streams through the node core: a topic is a queue or a stream, never both
// (PROTOCOL 5.14), and a stream exists only once declared (PROTOCOL 5.11
// step 3).
var (
	ErrTopicIsQueue      = newError(CodeInvalid, false, "the topic is a queue here: a topic is a queue or a stream, never both")
	ErrTopicIsStream     = newError(CodeInvalid, false, "the topic is a stream here: a topic is a queue or a stream, never both")
	ErrStreamNotDeclared = newError(CodeNotFound, false, "no such stream partition: declare the stream first (DECLARE_PLEXUS)")
)
