// Package node is the broker's decisions around its queue partitions, as
// pure state machines in the Step shape of core.Partition: sessions
// (handshake, auth, resume, reconnect grace, keepalive, subscriptions,
// reconcile, outbox limits), the node (connection admission, the session
// directory, the declared-queue catalogue, partition loading, session
// skeletons, identities) and the partition host (a core.Partition plus the
// routing of its replies and deliveries, dead-letter forwarding with retry,
// and the snapshot and spill policy). Nothing here does I/O; the production
// runner (io/broker) and the simulator (sim) drive the very same machines.
//
// # Machines and addresses
//
// A running broker is one Node, one Session per session and one Host per
// loaded queue partition. Each machine is stepped by one driver context at
// a time (production: a goroutine or a lock; simulator: its event loop):
//
//	rd := m.Step(in)
//
// and answers with a Ready of its own kind. Machines never call each other:
// they talk only through Envelopes (Ready.Out), addressed with Address, that
// the driver delivers as the receiver's Deliver input. The driver contract
// for envelopes:
//
//   - envelopes from one sender to one receiver arrive in the order they were
//     sent (FIFO per pair), after an arbitrary delay; envelopes from
//     different senders interleave arbitrarily;
//   - an envelope whose receiver does not exist (a session that ended and was
//     dropped, a partition that failed to load) is handed back to its sender
//     as a Bounced input, never dropped silently;
//   - a stored body (core.Body.Ref set) inside a Deliveries envelope is read
//     back by the driver before the session is stepped with it (the driver's
//     storage owns the bytes); a failed read is a storage fault: the driver
//     stops the broker (restart recovers). The same holds for the body of a
//     DeadLetterOut (read from the sending partition's storage before the
//     Node gets it): a dead-letter copy goes into another partition's log,
//     which must hold its bytes. A Host refuses a StoreDeadLetter whose body
//     is still a ref (DeadLetterFailed; the source retries).
//
// # Streams
//
// A stream partition (package core/stream) is hosted by a StreamHost, a
// fourth machine kind with the same Step shape (host_stream.go). The Node
// catalogues streams (DECLARE_PLEXUS; a topic is a queue or a stream, never
// both) and loads a stream partition for a LoadRequest of Kind KindStream:
// the driver recovers a stream.Partition (stream.Load, or
// stream.NewPartition for a new one) with the request's StreamConfig and
// Stream settings and starts NewStreamHost. A StreamHost's Ready carries,
// besides PersistEntries, Out and WakeMs, log reads (Ready.Reads, answered
// by StreamReadDone with the read's Token, bodies resolved) and truncations
// (Ready.Snapshot: storage saves Data as the snapshot at Index and drops the
// entries up to it, then answers SnapshotDone). Sessions learn a
// partition's kind from Opened.Kind and send stream inputs as
// StreamRequest; the StreamHost answers with Response(s), StreamDeliveries
// and StreamNotice.
//
// # Creating machines
//
// NewNode prepares the Node's boot record; NewHost may step its partition
// (catch-up Declare, re-emitted dead-letter copies). What they produce is
// carried in the Ready of their first Step: a driver steps a new Node or
// Host at once (a Tick), and persists the boot record before anything else.
//
// # Connections
//
// The driver mints a ConnID per accepted connection, in increasing order
// (a session takes reports about a connection older than the newest it
// heard of as stale), and tells the Node (ConnOpened). Until the Node binds the connection to a session
// (Ready.Bind), every frame read from it goes to the Node; after, to the
// bound session. Frames reach the core as (wire.Header, payload) exactly as
// read; the core decodes them with transport/wire and encodes every frame it
// sends. A machine's Ready.Frames are appended to the connection's outbox in
// order; Ready.Close asks the driver to close a connection after flushing
// what was queued before it. The driver reports a closed connection
// (ConnClosed) to the Node (which counts connections for its admission
// limit) and, when bound, to the bound session; and bytes accepted by the
// socket (Written) to the bound session, so that it can bound its outbox.
//
// # Time
//
// NowMs in every input is the driver's clock in milliseconds, from a
// monotonic source anchored at a wall-clock reading taken at boot: a wall
// clock step must not expire every lease at once. Machines ask for a Tick
// by Ready.WakeMs (0 = none).
//
// # Randomness
//
// Identities (client ids, resume tokens, the owner id, member ids) come from
// Entropy carried by the inputs that need them (ConnOpened, Boot): the
// production driver fills it from crypto/rand, the simulator from its seed.
//
// # Durability
//
// The Node persists its own log (catalogue, owner id, boot counter, session
// skeletons) through Ready.Persist and learns durability through Persisted,
// as a partition does: a DECLARE_QUEUE_OK is released only once its entry is
// durable. The Host persists its partition's entries the same way, and asks
// for snapshots (Ready.Snapshot) and spills (Ready.Spill); the driver's
// storage (package storage) carries them out.
//
// # Operator requests
//
// The admin API reaches the machines as envelopes from an AdminAddr. The
// Node answers GetRuntimeSettings / PutRuntimeSettings with a
// RuntimeSettingsState and GetGlobalDLQ / PutGlobalDLQ with a
// GlobalDLQState (msg_runtime.go); a change is recorded in the Node's log
// (recordRuntime, recordGlobalDLQ), and answered once durable and in force
// in every loaded queue partition (PartitionRuntime, acknowledged with
// SettingsApplied). Sessions are told a new grace with SessionRuntime
// (node_runtime.go, docs/runtime-settings.md).
package node
