// Package bench runs the peer-broker workload of ../shared/bench-peers against
// Fibril, so that Fibril's figures sit beside NATS JetStream's and RabbitMQ's
// from the same run on the same machine.
//
// The contract is the section "The workload, exactly" of
// ../shared/bench-peers/README.md; this package reimplements it rather than
// importing the harness. The peers themselves (NATS JetStream, RabbitMQ,
// Redis Streams) are Targets too, in package bench/peers, so that one
// program drives every system of a comparison with the same drivers.
//
// # The workload
//
//   - Every body is Workload.SizeBytes long. Bytes 0-7 hold the message id
//     (little-endian uint64), bytes 8-15 the send time (little-endian int64
//     nanoseconds on this process's monotonic clock, MonoNs); the rest is a
//     fixed xorshift filler, so the bytes are not trivially compressible.
//   - Ids are dense, 0..msgs-1; producer i of P publishes the contiguous block
//     SplitBlocks(msgs, P)[i] (the first msgs mod P producers get one more).
//   - One connection per producer and per consumer. A producer takes a slot of
//     its own window of Workload.Window slots before each publish; the slot
//     comes back when the confirmation (positive or negative) arrives. With a
//     rate R, producer i's message k is also not sent before
//     start + k*P/R (DueNs). The send time is taken right after the slot.
//   - Consumers allow Workload.Prefetch unsettled deliveries and settle every
//     delivery individually (Delivery.Complete, one ACK frame per message),
//     right after recording it. The receive time is taken when the client's
//     deliveries channel hands the message over.
//   - Each run uses a fresh queue (a name unique to the run, declared with one
//     partition). With the admin address known (fibril bench -admin-addr),
//     the queue is deleted after the run, inside the measured interval, as
//     the peers' drivers delete theirs; without it, it stays.
//
// # The figures
//
// confirmed-publish: secs (release of the producers to the last confirmation),
// msgs_per_s (positive confirms / secs), p50_ms, p99_ms, max_ms (confirm
// latency = confirmation arrival - send time, nearest rank), confirmed,
// nacked, dup_confirms.
//
// end-to-end: secs (release of the producers until every id was received),
// msgs_per_s (distinct ids / secs), p50_ms, p99_ms, max_ms (publish->deliver
// latency of each id's first delivery), delivered, unique, missing
// (msgs - unique), dups (deliveries of an id already seen), left (see below),
// pub_msgs_per_s, confirm_p50_ms, confirm_p99_ms, nacked (the publish side).
//
// Every line also carries server_cpu_s and server_rss_mb (from /proc/PID of
// the broker, when its PID is known), client_cpu_s (getrusage of this
// process), wall_s, and status=ok|timeout|error|unsupported.
//
// # Confirmations over Fibril's Go client
//
// The client offers pipelined confirms as a *client.Confirmation per publish,
// not a callback. Each producer therefore has one waiter goroutine that waits
// on its confirmations in publish order. That observes every confirm when it
// arrives because a single-partition queue confirms in offset order (group
// commit makes a prefix durable at once) and one connection's publishes get
// increasing offsets; if a confirm ever overtook an earlier one it would be
// observed late, never early. Over several partitions or queues (the sweeps)
// confirms do overtake each other, so there each one has a waiter goroutine
// of its own (at most Window per producer).
//
// # left
//
// Fibril has no admin API to count a queue's messages yet. After the consumers
// have closed their connections, a fresh consumer subscribes to the queue and
// counts (and acknowledges) everything that arrives until nothing has arrived
// for LeftIdle, listening at least ReconnectGrace + LeftIdle: the broker keeps
// a closed connection's unsettled deliveries in its dormant session for the
// reconnect grace (serve --reconnect-grace-ms) before requeueing them, so a
// probe that stopped earlier would miss exactly the deliveries whose ACKs got
// lost. left is -1 if the probe could not run.
package bench
