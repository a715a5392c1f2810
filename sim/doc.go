// Package sim is Fibril's deterministic simulator: it drives the real core
// partitions through simulated clocks, disks, networks, crashes and clients,
// from one goroutine and one seed, and records a history for the checker.
//
// # Determinism
//
// A run is a pure function of (scenario, seed, build): one goroutine, one
// event queue ordered by (time, scheduling order), and Rand streams forked
// from the seed for every choice. Maps are only looked up, never iterated
// where order matters. Run prints a trace hash over the whole history; the
// same seed and build give the same hash.
//
// # Shape
//
//	World        the run: event queue, true time, phases, fault processes
//	  Network    packets between clients and nodes: latency, loss,
//	             duplicates, partitions, resets; each Conn is an ordered
//	             stream that dies rather than skip
//	  Node       one broker process: partitions (through Machine), a Disk
//	             behind Storage, a Clock, group commit, crash and recovery,
//	             dead-letter forwarding
//	  Client     a producer or consumer with one connection at a time
//	recorder     the history (checker.Event) and the trace hash
//
// Addresses carry a node id (Conn.node) and the catalogue of partitions is
// shared, so a cluster adds nodes rather than a new simulator.
//
// # Phases
//
// The safety phase runs the scenario's faults (or, in swarm mode, faults
// drawn from the seed). The liveness phase turns every fault off; consumers
// ack everything, and the run must drain within LivenessPhaseMaxMs. At the
// end each node's log is read back and every message's final state recorded.
//
// # Glossary of history events
//
// See checker.Kind. Client events are calls and returns; node events are
// instants in the node's step order, stamped with the core's clock.
package sim
