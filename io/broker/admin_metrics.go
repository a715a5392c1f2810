package broker

import "sync/atomic"

// surfaceMetrics are the SPEC 13 counters the admin surface added: bytes
// on the wire and broken streams. Atomics only, written where the driver
// already is (one add per socket read or write, not per frame).
type surfaceMetrics struct {
	bytesIn  atomic.Uint64
	bytesOut atomic.Uint64
	// subscriptionsOpen is subscriptions opened minus closed, as the
	// sessions report them (Ready.Counted).
	subscriptionsOpen atomic.Int64
}
