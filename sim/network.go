package sim

// The simulated network between clients and nodes. Packets suffer latency
// (with a tail), loss, duplication and partitions; connections reset. Each
// connection is a reliable ordered stream built on those packets, as QUIC or
// TCP would give: a lost packet costs retransmit timeouts (head-of-line
// blocking for the ones behind it), a duplicate is dropped by sequence
// number, and a packet that cannot get through after RetransmitsMax attempts
// kills the connection. Invariants:
//   - each direction of a connection delivers messages in send order, each
//     at most once, or the connection dies; nothing arrives from a
//     connection after its receiver has learned that it is gone;
//   - every address names its node (Conn.node), so more nodes join the same
//     network without a new simulator.

const (
	toNode   = 0 // direction index: client -> node
	toClient = 1 // direction index: node -> client
)

// Conn is one client connection to one node.
type Conn struct {
	id              uint64
	client          *Client
	node            *Node
	nodeIncarnation uint64 // the node process that accepted it; 0 until then

	nextSeq       [2]uint64
	recvNext      [2]uint64
	lastArrivalMs [2]int64

	closedAtClient bool // the client knows the connection is gone
	closedAtNode   bool // the node knows
	doomed         bool // it will die: nothing more gets through

	subs []uint64 // node side: subscriptions opened on it
}

// NetStats counts what the network did to packets.
type NetStats struct {
	Packets           uint64
	LostTransmissions uint64
	Duplicates        uint64
	Resets            uint64
	Partitions        uint64
}

// Network carries packets between clients and nodes.
type Network struct {
	w        *World
	rng      *Rand
	healAtMs int64 // the current partition heals then (0 = none)
	inFlight int   // packets scheduled and not yet arrived
	stats    NetStats
}

func (n *Network) newConn(c *Client, node *Node) *Conn {
	n.w.nextConnID++
	return &Conn{id: n.w.nextConnID, client: c, node: node}
}

func (n *Network) latencyMs() int64 {
	f := &n.w.faults
	d := n.rng.RangeInt64(f.PacketDelayMinMs, f.PacketDelayMaxMs)
	if f.PacketDelayTailRatio > 0 && n.rng.Chance(f.PacketDelayTailRatio) {
		d += n.rng.RangeInt64(1, f.PacketDelayTailMs)
	}
	return d
}

// cutOff says whether client c is on the far side of a partition at atMs.
func (n *Network) cutOff(c *Client, atMs int64) bool {
	return c.cutOff && atMs < n.healAtMs
}

// transit returns when a packet sent now arrives, retransmitting after each
// loss; ok is false when every attempt is lost (the time is then when the
// sender gives up).
func (n *Network) transit(c *Conn) (atMs int64, ok bool) {
	f := &n.w.faults
	t := n.w.nowMs
	rtoMs := f.RetransmitTimeoutMs
	for attempt := 0; attempt <= f.RetransmitsMax; attempt++ {
		lost := n.cutOff(c.client, t) || n.rng.Chance(f.PacketLossRatio)
		if !lost {
			return t + n.latencyMs(), true
		}
		n.stats.LostTransmissions++
		t += rtoMs
		rtoMs = min(rtoMs*2, 2000)
	}
	return t, false
}

// send queues msg on c in direction dir.
func (n *Network) send(c *Conn, dir int, msg *message) {
	if c.doomed {
		return
	}
	if dir == toNode {
		assert(!c.closedAtClient, "a client sends only on a connection it thinks open")
	} else {
		assert(!c.closedAtNode, "a node sends only on a connection it thinks open")
	}
	n.stats.Packets++
	arriveMs, ok := n.transit(c)
	if !ok {
		n.doom(c, arriveMs, arriveMs, "retransmits exhausted")
		return
	}
	arriveMs = max(arriveMs, c.lastArrivalMs[dir]) // the stream delivers in order
	c.lastArrivalMs[dir] = arriveMs
	seq := c.nextSeq[dir]
	c.nextSeq[dir]++
	n.inFlight++
	n.w.at(arriveMs, func() { n.arrive(c, dir, seq, msg) })
	if n.rng.Chance(n.w.faults.PacketDuplicateRatio) {
		n.stats.Duplicates++
		n.inFlight++
		n.w.at(arriveMs+n.rng.RangeInt64(0, n.w.faults.PacketDelayMaxMs), func() { n.arrive(c, dir, seq, msg) })
	}
	if n.rng.Chance(n.w.faults.ConnectionResetRatio) {
		n.reset(c, "connection reset")
	}
}

func (n *Network) arrive(c *Conn, dir int, seq uint64, msg *message) {
	n.inFlight--
	if dir == toNode && c.closedAtNode || dir == toClient && c.closedAtClient {
		return
	}
	assert(seq <= c.recvNext[dir], "a stream never skips a sequence number")
	if seq < c.recvNext[dir] {
		return // the duplicate of a packet already delivered
	}
	c.recvNext[dir]++
	if dir == toNode {
		c.node.onMessage(c, msg)
	} else {
		c.client.onMessage(c, msg)
	}
}

// doom kills c: the node learns at nodeAtMs, the client at clientAtMs.
func (n *Network) doom(c *Conn, nodeAtMs, clientAtMs int64, why string) {
	if c.doomed {
		return
	}
	c.doomed = true
	n.w.at(nodeAtMs, func() { n.closeAtNode(c) })
	n.w.at(clientAtMs, func() { n.closeAtClient(c, why) })
}

// reset is a connection reset: each side learns after a one-way latency.
func (n *Network) reset(c *Conn, why string) {
	if c.doomed {
		return
	}
	n.stats.Resets++
	now := n.w.nowMs
	n.doom(c, now+n.latencyMs(), now+n.latencyMs(), why)
}

func (n *Network) closeAtNode(c *Conn) {
	if c.closedAtNode {
		return
	}
	c.closedAtNode = true
	c.node.onConnLost(c)
}

func (n *Network) closeAtClient(c *Conn, why string) {
	if c.closedAtClient {
		return
	}
	c.closedAtClient = true
	c.client.onConnLost(c, why)
}

// clientClose: the client drops c on purpose; the node learns after a
// latency, or after the keepalive timeout when the client is cut off.
func (n *Network) clientClose(c *Conn) {
	c.closedAtClient = true
	if c.doomed {
		return
	}
	c.doomed = true
	learnMs := n.w.nowMs + n.latencyMs()
	if n.cutOff(c.client, n.w.nowMs) {
		learnMs = n.w.nowMs + n.w.faults.KeepaliveTimeoutMs
	}
	n.w.at(learnMs, func() { n.closeAtNode(c) })
}

// nodeCrashed: the node process is gone, so its side is closed at once; the
// client learns from a reset (or its keepalive when cut off).
func (n *Network) nodeCrashed(c *Conn) {
	c.closedAtNode = true
	if c.doomed {
		return
	}
	c.doomed = true
	learnMs := n.w.nowMs + n.latencyMs()
	if n.cutOff(c.client, n.w.nowMs) {
		learnMs = n.w.nowMs + n.w.faults.KeepaliveTimeoutMs
	}
	n.w.at(learnMs, func() { n.closeAtClient(c, "node crashed") })
}

// partition cuts ratio of the clients off their nodes for durationMs.
// Connections that stay idle across it die at the keepalive timeout.
func (n *Network) partition(ratio float64, durationMs int64, why string) {
	now := n.w.nowMs
	if now < n.healAtMs || durationMs <= 0 {
		return // one partition at a time
	}
	var cut []uint32
	for _, c := range n.w.clients {
		c.cutOff = n.rng.Chance(ratio)
		if c.cutOff {
			cut = append(cut, c.id)
		}
	}
	if len(cut) == 0 {
		c := n.w.clients[n.rng.Intn(len(n.w.clients))]
		c.cutOff = true
		cut = append(cut, c.id)
	}
	n.healAtMs = now + durationMs
	n.stats.Partitions++
	n.w.fault("partition clients %v for %dms (%s)", cut, durationMs, why)
	if durationMs > n.w.faults.KeepaliveTimeoutMs {
		for _, c := range n.w.clients {
			if c.cutOff && c.conn != nil {
				dieMs := now + n.w.faults.KeepaliveTimeoutMs
				n.doom(c.conn, dieMs, dieMs, "keepalive timeout in a partition")
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

func (n *Network) heal() {
	if n.healAtMs == 0 {
		return
	}
	n.healAtMs = 0
	for _, c := range n.w.clients {
		c.cutOff = false
	}
	n.w.note("network healed")
}
