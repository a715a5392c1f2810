// Package core is Fibril's broker logic as a pure, deterministic state
// machine: no I/O, no clocks, no goroutines, no locks, no global randomness.
// The simulator (sim/) and the production runner (io/runner) drive the very
// same code, so whatever the simulator proves about it holds in production.
//
// # Driver contract
//
// A driver owns one Partition per loaded queue partition and feeds it inputs
// one at a time:
//
//	rd := p.Step(&core.Publish{NowMs: now, ...})
//	storage.Append(rd.Persist)      // in order, after all earlier entries
//	send(rd.Deliveries, rd.Replies) // already gated: safe to send now
//	forward(rd.DeadLetters)         // publish each copy, then DeadLetterDone
//	wakeAt(rd.NextWakeMs)           // send a Tick by then
//	... later, when storage has fsynced up to index N:
//	rd = p.Step(&core.Persisted{NowMs: now, UpToIndex: N})
//
// Ready is valid until the next Step. Time arrives as NowMs (Unix ms) in every
// input and only moves forward inside the core.
//
// The core never reads a payload. Once a publish is durable and its storage
// can give the bytes back, the driver may call p.SpillBody(offset, ref): the
// message keeps its state and its body becomes stored (Body.Ref set, Payload
// nil), and deliveries and dead-letter copies of it carry the ref for the
// driver to read back. Which bodies are in memory is the driver's choice, not
// partition state: it is not logged, and snapshots record stored refs.
//
// # Glossary
//
// Inputs: Tick (time passed), Persisted (storage durable up to an index),
// Declare (queue settings), SetGlobalDLQ, Publish (optionally delayed, with
// TTL and confirm), Subscribe / Unsubscribe, PauseSubscription (no new deliveries while a
// session has no transport; volatile), Ack (complete), Nack (retry,
// retry-after, fail), DeadLetterDone (a dead-letter copy is stored),
// SetOwner (the exclusive owner among Exclusive subscriptions, with a
// generation that only grows; volatile, never answered: see exclusive.go),
// SetRuntime (the lease and expiry batch from now on; configuration, not
// logged, never answered: see runtime.go).
//
// Entries (the log): Declare, GlobalDLQ, Publish, Lease (ready -> inflight),
// AutoAck (ready -> settled at delivery), Ack (inflight -> settled), Requeue
// (inflight -> ready or delayed, one more attempt), Release (delayed ->
// ready), DeadLetter (-> pending dead-letter), Discard (-> settled, no copy),
// DeadLettered (pending dead-letter -> settled). Each is stamped (epoch,
// index); state is a function of the entries alone.
//
// Effects (Ready): Persist, Deliveries, Replies (errors at once; publish
// confirms, declare replies after durability), Settled (durable final
// outcomes), DeadLetters (copies to store in another queue), NextWakeMs.
//
// Message states: ready, delayed (until not_before), inflight (leased until a
// deadline, holding a delivery tag), pending_dlq (copy on its way to the
// dead-letter target). Settled messages are gone; their offsets form the
// settled set below NextOffset.
package core
