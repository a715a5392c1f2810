// Package broker is Fibril's production runner: it moves bytes and time into
// the pure core (core.Partition) and its effects out, over real connections
// and a real write-ahead log.
//
// Shape (one goroutine per job, no lock held across I/O):
//
//   - a session per client connection: a reader goroutine that decodes frames,
//     runs the handshake and auth, and turns requests into partition inputs;
//     a writer goroutine that flushes the session's outbox, many frames per
//     write;
//   - a runner per loaded queue partition: the only goroutine that touches its
//     core.Partition. It steps inputs, hands Ready.Persist to the partition's
//     group-commit writer (io/logstore), feeds durability back as
//     core.Persisted, routes replies and deliveries to sessions, forwards
//     dead-letter copies, and sleeps until Ready.NextWakeMs;
//   - a registry that loads partitions lazily on first use, so idle declared
//     queues cost a catalogue line and no memory.
//
// Sessions outlive their connection for the reconnect grace: a dropped client
// that resumes with its identity in time keeps its subscriptions and may still
// settle its deliveries.
package broker
