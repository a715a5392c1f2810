// Package peers drives the peer brokers of ../shared/bench-peers (NATS
// JetStream, RabbitMQ quorum, classic and stream queues, Redis Streams)
// through their maintained Go clients, as bench.Targets, so that `fibril
// bench --system <peer>` runs exactly the workload that it runs against
// Fibril and prints the same line.
//
// The reference is ../shared/bench-peers (README "The workload, exactly" and
// "How each system implements it"); this package is written anew over this
// project's drivers (bench/driver.go, bench/fanout.go), which already hold
// the windows, ids, timing and loss checks. What each adapter must match, and
// how it does, is in the file of its system and in docs/PERF-LOG.md
// ("the peers in the project").
//
// Common to every adapter:
//   - One connection per producer, per consumer and per reader, plus one
//     admin connection per Target for Prepare, Remaining and Cleanup; no
//     client reconnects or retries a command on its own.
//   - Prepare deletes a leftover destination of the same fixed name
//     (bench.cp and the like) and creates a fresh durable one; Cleanup
//     (bench.Cleaner) deletes it after the scenario, inside the measured
//     interval, as the harness does.
//   - Remaining asks the broker how much the queue still holds and, like the
//     harness, asks again every 200 ms (at most 50 times) until it says 0.
//   - Every URL must name one loopback address (RequireLoopback).
package peers
