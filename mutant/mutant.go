// Package mutant holds the switches that turn on deliberately broken
// variants of production code, so that tests can show that the simulator
// sweep and the power-loss loop catch each one (a check that cannot fail
// proves nothing). Active is empty in every real run: the simulator's
// mutant tests set it for one run at a time, and a `fibril` binary built
// with the fibril_mutants tag reads it from FIBRIL_MUTANT (cmd/fibril).
//
// Each name is a constant below; the code it breaks says so beside the
// check, as `if mutant.On(mutant.X) { ... }`.
package mutant

// Active names the one broken variant in force, or "" for none. It is set
// before a run starts and never changed during one.
var Active string

// On reports whether the named variant is in force.
func On(name string) bool { return Active != "" && Active == name }

// The broken variants. Append-only; each says what it breaks.
const (
	// DurableOnSubmit: storage reports entries durable when they are
	// submitted, not after their fsync returns.
	DurableOnSubmit = "durable-on-submit"
	// NoBlobDatasync: blob payload files are never fdatasynced.
	NoBlobDatasync = "no-blob-datasync"
	// NoDirSync: the directory entry of a new segment or blob file is never
	// fsynced.
	NoDirSync = "no-dir-sync"
	// SkipCRC: recovery (and Log.ReadEntries) accepts records without
	// checking their CRC.
	SkipCRC = "skip-crc"
	// AcceptTornTail: recovery keeps a torn last record instead of cutting it.
	AcceptTornTail = "accept-torn-tail"
	// RecoveryNoSync: recovery fsyncs only the tail segment and the
	// directory, not every segment and blob file it read back (which a
	// process crash may have left only in the page cache).
	RecoveryNoSync = "recovery-no-sync"
	// EarlyGraceRequeue: a dormant session's grace expires at a tenth of
	// its length, requeueing deliveries a resuming client may still settle.
	EarlyGraceRequeue = "early-grace-requeue"
	// WallClockLeases: the production driver stamps inputs with the wall
	// clock read at every step, so a clock step expires every lease at once.
	WallClockLeases = "wall-clock-leases"
	// DeadLetterGiveUp: a partition forgets a dead-letter copy its target
	// refused or failed to load, so the source stays pending until a
	// restart (io/broker's old forwarding).
	DeadLetterGiveUp = "dead-letter-give-up"
	// GhostSubscription: deliveries bounced by a session that is gone leave
	// its subscription registered, so each lease expiry burns a retry.
	GhostSubscription = "ghost-subscription"
	// NoHandshakeTimeout: a connection that never completes its HELLO is
	// never closed.
	NoHandshakeTimeout = "no-handshake-timeout"
	// SnapshotOnlyWhenQuiescent: a partition snapshots only when everything
	// it appended is durable, so under sustained traffic it never does.
	SnapshotOnlyWhenQuiescent = "snapshot-only-when-quiescent"
	// ClientSettleStale: the Go client settles a delivery of a session the
	// broker did not resume over the new connection instead of refusing it
	// with ErrStaleDelivery.
	ClientSettleStale = "client-settle-stale"
	// StreamPersistedOnSubmit (simulator driver): a stream partition's
	// entries are reported Persisted as they are handed to storage, before
	// any fsync, so confirms and durable-tier deliveries run ahead of the disk.
	StreamPersistedOnSubmit = "stream-persisted-on-submit"
	// StreamDropDelivery (simulator driver): one record of a
	// StreamDeliveries batch of three or more is lost on its way to the
	// session.
	StreamDropDelivery = "stream-drop-delivery"
	// StreamReorderDeliveries (simulator driver): the first two records of
	// a StreamDeliveries batch of three or more swap places on the way to
	// the session.
	StreamReorderDeliveries = "stream-reorder-deliveries"
	// StreamCursorSkip (core/stream/subscription.go): an ack commits
	// max(acked)+2, so a durable cursor passes a record nobody acked.
	StreamCursorSkip = "stream-cursor-skip"
	// StreamDeliverUnfiltered (core/stream/serve.go): a subscription's
	// filter is ignored, so it is handed records that do not match.
	StreamDeliverUnfiltered = "stream-deliver-unfiltered"
	// StreamNoRetention (core/stream/retention.go): retain never runs, so
	// a stream keeps every record past its bounds.
	StreamNoRetention = "stream-no-retention"
	// StreamEagerRetention (core/stream/retention.go): retain drops every
	// sealed durable segment, whether a bound asks for it or not.
	StreamEagerRetention = "stream-eager-retention"
	// StreamSpeculativeFlagLost (simulator driver): the speculative flag
	// of a StreamDeliveries batch is cleared on its way to the session, so
	// its DELIVERs lack fibril.speculative: 1.
	StreamSpeculativeFlagLost = "stream-speculative-flag-lost"
	// StreamReadCacheStale (core/stream/readcache.go): the read cache
	// answers for an offset with the record cached before it, when it holds
	// that one: a subscriber served from the cache gets another record's
	// body under the offset.
	StreamReadCacheStale = "stream-read-cache-stale"
	// GateOpenEarly (core/exclusive.go): the exclusive gate opens for a new
	// owner without waiting for the old owner's unsettled deliveries (nor
	// for recovered leases or a non-exclusive subscription's), so two
	// consumers work the partition at once and per-key order breaks.
	GateOpenEarly = "gate-open-early"
	// CohortDropOwner (core/node/node_cohort.go): the Node leaves the
	// highest partition a change hands to a member without an owner: its
	// Host is told nobody owns it and the member's notice leaves it out, so
	// the assignment leaves a partition uncovered.
	CohortDropOwner = "cohort-drop-owner"
	// GateIgnoresRecoveredLeases (core/exclusive.go): the exclusive gate
	// counts only the leases of live subscriptions, so after a restart the
	// recovered leases (held by no live subscription, their consumer in the
	// dead process maybe still at work) no longer keep it shut: the new
	// owner is handed the partition before the old holder's deliveries are
	// settled or expired.
	GateIgnoresRecoveredLeases = "gate-ignores-recovered-leases"
	// RecoveryDropsRecentAcks (core/snapshot.go Recover): recovery skips
	// the ack entries among the last RecentAcksDropped entries it replays,
	// as if the last rounds' acks had never reached the log while the
	// publishes after them had: a restarted partition redelivers messages
	// whose acks a later confirm had already made durable.
	RecoveryDropsRecentAcks = "recovery-drops-recent-acks"
)

// RecentAcksDropped is how far back from the end of the replayed entries
// RecoveryDropsRecentAcks drops acks.
const RecentAcksDropped = 100
