package node

// The Host's side of idle queue eviction (SPEC 9, docs/idle.md): it is the
// one that knows its own leases, pending settles, replies owed and storage
// work, so it answers the Node's UnloadCheck. Invariants:
//   - a yes is given only when nothing volatile would be lost by dropping
//     the Host and recovering the partition from its log later: no
//     subscription, lease, gated item, reference, unpersisted entry,
//     dead-letter copy or snapshot, and no timer already due;
//   - after a yes the Host is released: it steps no timer (a Tick would
//     expire TTLs and append entries the drop could lose) and asks for no
//     wake-up; the Node holds its next deadline instead.

// Reasons an UnloadCheck is refused (queues_debug shows them as
// "skipped: <reason>"). Append-only: operators may grep for them.
const (
	idleReasonSubscribers = "subscribers"
	idleReasonLeases      = "leases"
	idleReasonSettles     = "pending settles"
	idleReasonTags        = "broker tags"
	idleReasonStorage     = "storage inflight"
	idleReasonDeadLetters = "dead-letter copies in flight"
	idleReasonSnapshot    = "snapshot in flight"
	idleReasonTimerDue    = "timer work due"
	idleReasonWindow      = "idle window not elapsed"
)

// noteActivity stamps the Host's last activity: any envelope that is a
// client's or another machine's use of the partition.
func (h *Host) noteActivity(msg Message) {
	switch msg.(type) {
	case *UnloadCheck, *UnloadCancel, *Forget:
		// Asking and forgetting are not use: a sweep must not keep a queue
		// loaded by looking at it.
	default:
		h.lastActiveMs = h.nowMs
	}
}

// onUnloadCheck answers the Node: yes (and stop) or the first condition
// that fails.
func (h *Host) onUnloadCheck(msg *UnloadCheck) {
	assertHold(msg.Seq != 0, "an unload check carries a sequence number")
	assertHold(!h.released, "a released Host is asked nothing more")
	v := h.p.IdleView()
	idle := h.nowMs - h.lastActiveMs
	answer := &UnloadAnswer{Seq: msg.Seq, Subscribers: max(v.Subscriptions, len(h.subs)), IdleMs: idle}
	switch {
	case v.Subscriptions > 0 || len(h.subs) > 0:
		answer.Reason = idleReasonSubscribers
	case v.Inflight > 0:
		answer.Reason = idleReasonLeases
	case v.Gated > 0:
		answer.Reason = idleReasonSettles
	case len(h.refs) > 0:
		answer.Reason = idleReasonTags
	case v.Unpersisted:
		answer.Reason = idleReasonStorage
	case len(h.dlq) > 0 || h.dlqActive > 0:
		answer.Reason = idleReasonDeadLetters
	case h.snapshotInflight != 0:
		answer.Reason = idleReasonSnapshot
	case v.NextWakeMs != 0 && v.NextWakeMs <= h.nowMs:
		// Work due now is done loaded; the next sweep asks again.
		answer.Reason = idleReasonTimerDue
	case idle < msg.IdleAfterMs:
		answer.Reason = idleReasonWindow
	default:
		answer.OK, answer.WakeMs = true, v.NextWakeMs
		h.released = true
	}
	assertHold(answer.OK == (answer.Reason == ""), "a refusal says why, a yes says nothing")
	h.send(NodeAddr(), answer)
}

// onUnloadCancel: the Node took its question back; the Host runs on (its
// timers fire at the next step: finishStep asks for its wake-up again).
func (h *Host) onUnloadCancel(msg *UnloadCancel) {
	assertHold(msg.Seq != 0, "a cancel names its check")
	assertHold(h.released, "only a Host that said yes is cancelled")
	h.released = false
}

// onForget relays a session's Forget to the Node (FIFO behind that
// session's requests, which this Host has all stepped by now).
func (h *Host) onForget(from Address) {
	assertHold(from.Kind == AddrSession, "sessions forget their opens")
	h.send(NodeAddr(), &PublisherGone{Session: from.Session})
}

// Released says the Host agreed to be unloaded and waits to be dropped.
func (h *Host) Released() bool { return h.released }
