package sim

// The simulated network between client peers and broker processes, carrying
// byte streams: what a peer writes is a chunk of bytes (whole frames, or a
// part of one), and what arrives is reassembled into frames by the
// receiver, exactly as a socket reader would. Chunks suffer latency (with a
// tail), loss with retransmission, duplication and partitions; links reset.
// Invariants:
//   - each direction of a link delivers its chunks in write order, each at
//     most once, or the link dies: never a skipped or reordered chunk within
//     one link (reordering happens only across links);
//   - nothing arrives on a side after that side learned the link is gone;
//   - the broker-to-peer direction is flow-controlled: at most
//     socketWindowBytes are in flight or unread by the peer, so a peer that
//     stops reading makes the broker's outbox grow (a slow consumer);
//   - every chunk is a copy: Ready.Sends bytes are valid only until the
//     machine's next Step.

const (
	toBroker = 0 // direction index: peer -> broker
	toPeer   = 1 // direction index: broker -> peer
)

// socketWindowBytes is how many bytes a broker's socket holds on their way
// to a peer before it stops accepting more (the kernel's send buffer plus the
// peer's receive buffer).
const socketWindowBytes = 256 << 10

// Link is one transport connection between one peer and one broker.
type Link struct {
	id     uint64
	peer   *Peer
	broker *Broker
	// bconn is the broker's ConnID for this link (0 until accepted), and
	// incarnation the broker process that accepted it.
	bconn       uint64
	incarnation uint64

	nextSeq       [2]uint64
	recvNext      [2]uint64
	lastArrivalMs [2]int64

	closedAtPeer   bool // the peer knows the link is gone
	closedAtBroker bool // the broker knows
	doomed         bool // it will die: nothing more gets through

	// inFlightToPeerBytes: bytes the broker's socket accepted that the peer
	// has not read yet (flow control).
	inFlightToPeerBytes int
}

// NetStats counts what the network did to chunks (a Result reports it).
type NetStats struct {
	Packets           uint64 // chunks
	LostTransmissions uint64
	Duplicates        uint64
	Resets            uint64
	Partitions        uint64
}

// FabricStats counts what the network did to chunks.
type FabricStats struct {
	Chunks            uint64
	Bytes             uint64
	LostTransmissions uint64
	Duplicates        uint64
	Resets            uint64
	Partitions        uint64
}

// Fabric carries chunks between peers and brokers.
type Fabric struct {
	w        *World
	rng      *Rand
	healAtMs int64 // the current partition heals then (0 = none)
	inFlight int   // chunks scheduled and not yet arrived
	stats    FabricStats
	nextID   uint64
}

func (n *Fabric) newLink(p *Peer, b *Broker) *Link {
	n.nextID++
	return &Link{id: n.nextID, peer: p, broker: b}
}

func (n *Fabric) latencyMs() int64 {
	f := &n.w.faults
	d := n.rng.RangeInt64(f.PacketDelayMinMs, f.PacketDelayMaxMs)
	if f.PacketDelayTailRatio > 0 && n.rng.Chance(f.PacketDelayTailRatio) {
		d += n.rng.RangeInt64(1, f.PacketDelayTailMs)
	}
	return d
}

func (n *Fabric) cutOff(p *Peer, atMs int64) bool { return p.cutOff && atMs < n.healAtMs }

// transit returns when a chunk written now arrives, retransmitting after
// each loss; ok is false when every attempt is lost.
func (n *Fabric) transit(l *Link) (atMs int64, ok bool) {
	f := &n.w.faults
	t := n.w.nowMs
	rtoMs := f.RetransmitTimeoutMs
	for attempt := 0; attempt <= f.RetransmitsMax; attempt++ {
		lost := n.cutOff(l.peer, t) || n.rng.Chance(f.PacketLossRatio)
		if !lost {
			return t + n.latencyMs(), true
		}
		n.stats.LostTransmissions++
		t += rtoMs
		rtoMs = min(rtoMs*2, 2000)
	}
	return t, false
}

// write sends a copy of chunk on l in direction dir. A nil chunk toward
// the broker is the link's opening (the broker accepts it), ordered before
// every byte written after it.
func (n *Fabric) write(l *Link, dir int, chunk []byte) {
	if l.doomed || chunk != nil && len(chunk) == 0 {
		return
	}
	assert(chunk != nil || dir == toBroker, "only a peer opens a link")
	if dir == toBroker {
		assert(!l.closedAtPeer, "a peer writes only on a link it thinks open")
	} else {
		assert(!l.closedAtBroker, "a broker writes only on a link it thinks open")
		l.inFlightToPeerBytes += len(chunk)
	}
	data := append([]byte(nil), chunk...)
	n.stats.Chunks++
	n.stats.Bytes += uint64(len(data))
	arriveMs, ok := n.transit(l)
	if !ok {
		n.doom(l, arriveMs, arriveMs, "retransmits exhausted")
		return
	}
	arriveMs = max(arriveMs, l.lastArrivalMs[dir]) // the stream delivers in order
	l.lastArrivalMs[dir] = arriveMs
	seq := l.nextSeq[dir]
	l.nextSeq[dir]++
	n.inFlight++
	n.w.at(arriveMs, func() { n.arrive(l, dir, seq, data) })
	if n.rng.Chance(n.w.faults.PacketDuplicateRatio) {
		n.stats.Duplicates++
		n.inFlight++
		n.w.at(arriveMs+n.rng.RangeInt64(0, n.w.faults.PacketDelayMaxMs), func() { n.arrive(l, dir, seq, data) })
	}
	if n.rng.Chance(n.w.faults.ConnectionResetRatio) {
		n.reset(l, "connection reset")
	}
}

func (n *Fabric) arrive(l *Link, dir int, seq uint64, data []byte) {
	n.inFlight--
	if dir == toBroker && l.closedAtBroker || dir == toPeer && l.closedAtPeer {
		return
	}
	assert(seq <= l.recvNext[dir], "a stream never skips a chunk")
	if seq < l.recvNext[dir] {
		return // the duplicate of a chunk already delivered
	}
	l.recvNext[dir]++
	if dir == toBroker {
		l.broker.onBytes(l, data)
	} else {
		l.peer.onBytes(l, data)
	}
}

// peerRead says the peer consumed bytes of the broker-to-peer direction:
// the broker's socket has room again after the window update travels back.
func (n *Fabric) peerRead(l *Link, bytes int) {
	l.inFlightToPeerBytes -= bytes
	assert(l.inFlightToPeerBytes >= 0, "a peer reads only what was sent")
	if l.closedAtBroker || l.doomed {
		return
	}
	n.w.after(n.latencyMs(), func() { l.broker.onWindow(l) })
}

// doom kills l: the broker learns at brokerAtMs, the peer at peerAtMs.
func (n *Fabric) doom(l *Link, brokerAtMs, peerAtMs int64, why string) {
	if l.doomed {
		return
	}
	l.doomed = true
	n.w.at(brokerAtMs, func() { n.closeAtBroker(l) })
	n.w.at(peerAtMs, func() { n.closeAtPeer(l, why) })
}

// reset is a connection reset: each side learns after a one-way latency.
func (n *Fabric) reset(l *Link, why string) {
	if l.doomed {
		return
	}
	n.stats.Resets++
	now := n.w.nowMs
	n.doom(l, now+n.latencyMs(), now+n.latencyMs(), why)
}

func (n *Fabric) closeAtBroker(l *Link) {
	if l.closedAtBroker {
		return
	}
	l.closedAtBroker = true
	l.broker.onLinkLost(l)
}

func (n *Fabric) closeAtPeer(l *Link, why string) {
	if l.closedAtPeer {
		return
	}
	l.closedAtPeer = true
	l.peer.onLinkLost(l, why)
}

// peerClose: the peer drops l on purpose; the broker learns after a
// latency, or after the keepalive timeout when the peer is cut off.
func (n *Fabric) peerClose(l *Link) {
	l.closedAtPeer = true
	if l.doomed {
		return
	}
	l.doomed = true
	learnMs := n.w.nowMs + n.latencyMs()
	if n.cutOff(l.peer, n.w.nowMs) {
		learnMs = n.w.nowMs + n.w.faults.KeepaliveTimeoutMs
	}
	n.w.at(learnMs, func() { n.closeAtBroker(l) })
}

// brokerClose: the broker closes l (Ready.Close, or its process died); the
// peer learns after a latency, or at its keepalive when cut off.
func (n *Fabric) brokerClose(l *Link, why string) {
	l.closedAtBroker = true
	if l.doomed {
		return
	}
	l.doomed = true
	learnMs := n.w.nowMs + n.latencyMs()
	if n.cutOff(l.peer, n.w.nowMs) {
		learnMs = n.w.nowMs + n.w.faults.KeepaliveTimeoutMs
	}
	n.w.at(learnMs, func() { n.closeAtPeer(l, why) })
}

// partition cuts ratio of the peers off their brokers for durationMs. Links
// that stay idle across it die at the keepalive timeout.
func (n *Fabric) partition(ratio float64, durationMs int64, why string) {
	now := n.w.nowMs
	if now < n.healAtMs || durationMs <= 0 || len(n.w.peers) == 0 {
		return // one partition at a time
	}
	var cut []uint32
	for _, p := range n.w.peers {
		p.cutOff = n.rng.Chance(ratio)
		if p.cutOff {
			cut = append(cut, p.id)
		}
	}
	if len(cut) == 0 {
		p := n.w.peers[n.rng.Intn(len(n.w.peers))]
		p.cutOff = true
		cut = append(cut, p.id)
	}
	n.healAtMs = now + durationMs
	n.stats.Partitions++
	n.w.fault("network-partition", "partition clients %v for %dms (%s)", cut, durationMs, why)
	if durationMs > n.w.faults.KeepaliveTimeoutMs {
		for _, p := range n.w.peers {
			if p.cutOff && p.link != nil {
				dieMs := now + n.w.faults.KeepaliveTimeoutMs
				n.doom(p.link, dieMs, dieMs, "keepalive timeout in a partition")
			}
		}
	}
	healAtMs := n.healAtMs
	n.w.at(healAtMs, func() {
		if n.healAtMs == healAtMs {
			n.heal()
		}
	})
}

func (n *Fabric) heal() {
	if n.healAtMs == 0 {
		return
	}
	n.healAtMs = 0
	for _, p := range n.w.peers {
		p.cutOff = false
	}
	n.w.note("network healed")
}
