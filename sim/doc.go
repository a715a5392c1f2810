// Package sim is Fibril's deterministic simulator: it drives the node core
// production drives (core/node's Node, Session and Host machines, and
// through them core.Partition) over the production storage code (package
// storage, on storage/simwal over the crashable storage/simfs), with
// clients that speak the real wire protocol (transport/wire) over a
// simulated network, from one event loop and one seed, and records a
// history of what the clients observed for the checker.
//
// # Determinism
//
// A run is a pure function of (scenario, seed, build): one event queue
// ordered by (time, scheduling order), and Rand streams forked from the
// seed for every choice. Maps are only looked up, never iterated where
// order matters. The one other goroutine, a storage round's worker, runs
// strictly alternating with the event loop (gatedfs.go), so it adds no
// scheduling freedom. Run prints a trace hash over the whole history; the
// same seed and build give the same hash.
//
// # Shape
//
//	World      the run: event queue, true time, phases, fault processes
//	  Fabric   byte streams between peers and brokers: latency, loss with
//	           retransmission, duplicates, partitions, resets; each Link is
//	           ordered (chunks never reorder within a link, only across)
//	           and flow-controlled (a peer that stops reading fills the
//	           broker's outbox)
//	  Broker   one broker process, the plumbing io/broker does in
//	           production: accepts links, frames bytes for the Node or the
//	           bound Session, delivers envelopes between machines (FIFO per
//	           pair, seeded delays, bounces), resolves stored payloads,
//	           loads partitions, answers password checks, and carries out
//	           Ready effects; crash (page cache kept) and power loss
//	  brokerStore  the storage package's record log, partition Logs,
//	           group-commit Planner and PayloadReader over gatedFS: fsyncs
//	           take simulated time, faults come from simfs
//	  streams  a StreamHost per loaded stream partition (broker_stream.go):
//	           its storage.Log in the same rounds, Reads answered with
//	           Log.ReadEntries between rounds, truncation by snapshot
//	  Peer     a producer, consumer or declarer speaking frames: HELLO (with
//	           resume), AUTH, RECONCILE_CLIENT, PUBLISH(_DELAYED),
//	           SUBSCRIBE, ACK, NACK, DECLARE_QUEUE; misbehaving links
//	           (partial headers, no AUTH, oversized frames, split writes);
//	           stream producers and subscribers (peer_stream.go):
//	           DECLARE_PLEXUS, PUBLISH to streams, SUBSCRIBE_STREAM, ACK;
//	           cohort members (peer_cohort.go): exclusive SUBSCRIBE with
//	           consumer_group and member_id, ASSIGNMENT_CHANGED, leaves,
//	           rejoins and moves to new sessions
//	recorder   the history (checker.Event) and the trace hash
//
// # Phases
//
// The safety phase runs the scenario's faults (or, in swarm mode, faults
// drawn from the seed). The liveness phase turns every fault off;
// consumers ack everything, and the run must drain within
// LivenessPhaseMaxMs. At the end every partition is recovered once more
// from its storage after a process crash (its recovery is checked against
// what was written), and every message's final state is recorded.
//
// # Glossary of history events
//
// See checker.Kind. Client events are calls and returns as the peer made
// and decoded them (publishes, subscribes, settles, DELIVER frames,
// attaches); node events are what the driver saw the machines do (log
// entries, confirms, deliveries, subscription starts and ends, durable
// settlements), stamped with the core's clock, plus crashes and recoveries.
package sim
