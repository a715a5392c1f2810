// Package checker judges a simulator history: porcupine models per message
// (the lifecycle) and per partition (FIFO first deliveries), and invariant
// checks over the whole run, one for each numbered property of DESIGN.md
// ("What the checker must be able to say") that a standalone broker has:
// items 1 to 8 and 10 (streams: streams.go; exclusive consumer groups:
// cohorts.go). It imports only core's types.
//
// A history is JSON lines (history.go): a Meta header, then events in the
// order the simulator recorded them. Check returns a Report; a failing one
// can be written out with WriteArtifacts (the history and porcupine's HTML
// visualisation of the messages involved).
//
// Soundness before strength: every check accepts everything the core may
// legitimately do (at-least-once redelivery after a crash, tags reissued
// after a crash, clocks that step back, leases that survive or not
// depending on what reached the disk), and resolves crashes exactly from the
// log indexes the node reports rather than by guessing. An unknown result
// (a porcupine timeout) counts as a failure.
package checker
