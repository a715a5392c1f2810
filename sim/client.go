package sim

import (
	"github.com/fibril-go/fibril/checker"
)

// A client is one producer or consumer process with one connection to its
// node at a time. Invariants:
//   - every request is recorded as a call before it is sent, and its return
//     when the reply arrives; a connection that dies takes its pending
//     requests with it, and they never get a return (unknown outcome);
//   - delivery tags belong to a subscription on a connection: once either is
//     gone, the client never settles those tags;
//   - a lost connection is re-dialled after ReconnectDelay, forever.
type Client struct {
	id       uint32
	w        *World
	rng      *Rand
	clock    Clock
	consumer bool
	node     *Node
	cutOff   bool // on the far side of the current network partition

	conn      *Conn
	connected bool
	pending   map[uint64]*clientOp

	// Producer.
	published           int
	outstandingConfirms int
	roundRobin          []int // next partition per queue for keyless publishes

	// Consumer.
	subs          []*clientSub // one per catalogue partition, by index
	vanishUntilMs int64
}

type clientOp struct {
	kind    msgKind
	part    int
	msgID   uint64
	confirm bool
	sub     *clientSub
	subID   uint64
	tags    []uint64
}

// clientSub is the consumer's subscription to one partition.
type clientSub struct {
	part     int
	id       uint64 // 0 = not subscribed
	active   bool   // the subscribe returned ok
	pending  bool   // a subscribe or unsubscribe is on its way
	prefetch uint32
	autoAck  bool
	batch    []batchedAck // acks gathered for one request
}

type batchedAck struct{ tag, msgID uint64 }

func newClient(w *World, id uint32, consumer bool, node *Node, rng *Rand) *Client {
	c := &Client{id: id, w: w, rng: rng, consumer: consumer, node: node}
	c.clock = drawClock(rng, &w.faults)
	if consumer {
		for i := range w.catalogue {
			c.subs = append(c.subs, &clientSub{part: i})
		}
	}
	return c
}

func (c *Client) nowMs() int64 { return c.clock.NowMs(c.w.nowMs) }

func (c *Client) start() {
	c.connect()
	if c.consumer {
		c.maintain()
	} else {
		c.w.after(c.rng.RangeInt64(0, c.w.scenario.Workload.PublishIntervalMaxMs), c.produce)
	}
}

func (c *Client) connect() {
	if c.conn != nil || c.w.stopped {
		return
	}
	conn := c.w.net.newConn(c, c.node)
	c.conn, c.connected = conn, false
	c.pending = make(map[uint64]*clientOp)
	c.w.net.send(conn, toNode, &message{kind: msgHello})
	c.w.after(c.w.scenario.Workload.ConnectTimeoutMs, func() {
		if c.conn == conn && !c.connected {
			c.drop("connect timeout")
		}
	})
}

// drop closes the current connection on purpose.
func (c *Client) drop(why string) {
	conn := c.conn
	if conn == nil {
		return
	}
	c.w.net.clientClose(conn)
	c.lost(why)
}

// onConnLost: the network told the client its connection is gone.
func (c *Client) onConnLost(conn *Conn, why string) {
	if conn == c.conn {
		c.lost(why)
	}
}

func (c *Client) lost(why string) {
	c.w.rec.add(checker.Event{Kind: checker.KindDisconnect, Client: c.id, Text: why})
	c.conn, c.connected, c.pending = nil, false, nil
	c.outstandingConfirms = 0
	for _, s := range c.subs {
		s.id, s.active, s.pending, s.batch = 0, false, false, nil
	}
	w := &c.w.scenario.Workload
	c.w.after(c.rng.RangeInt64(w.ReconnectDelayMinMs, w.ReconnectDelayMaxMs), c.connect)
}

func (c *Client) send(msg *message, op *clientOp) {
	c.pending[msg.op] = op
	c.w.net.send(c.conn, toNode, msg)
}

func (c *Client) onMessage(conn *Conn, msg *message) {
	if conn != c.conn {
		return
	}
	switch msg.kind {
	case msgHelloOk:
		c.connected = true
		if c.consumer {
			c.subscribeAll()
		}
	case msgReply:
		op := c.pending[msg.op]
		if op == nil {
			return
		}
		delete(c.pending, msg.op)
		c.onReply(msg, op)
	case msgDelivery:
		c.onDelivery(conn, msg)
	}
}

func (c *Client) onReply(msg *message, op *clientOp) {
	rec := c.w.rec
	switch op.kind {
	case msgPublish:
		if op.confirm {
			c.outstandingConfirms--
		}
		rec.add(checker.Event{Kind: checker.KindPublishReturn, Client: c.id, Op: msg.op, Part: op.part + 1,
			MsgID: op.msgID, Ok: msg.ok, Offset: msg.offset, Err: msg.errText})
	case msgSubscribe:
		rec.add(checker.Event{Kind: checker.KindSubscribeReturn, Client: c.id, Op: msg.op, Part: op.part + 1,
			Sub: op.subID, Ok: msg.ok, Err: msg.errText})
		s := op.sub
		if s.id == op.subID {
			s.pending = false
			s.active = msg.ok
			if !msg.ok {
				s.id = 0 // maintain retries later
			}
		}
	case msgUnsubscribe:
		rec.add(checker.Event{Kind: checker.KindUnsubscribeReturn, Client: c.id, Op: msg.op, Part: op.part + 1,
			Sub: op.subID, Ok: msg.ok, Err: msg.errText})
		if op.sub.id == 0 {
			op.sub.pending = false
		}
	case msgSettle:
		for _, tag := range op.tags {
			stale := !msg.ok && containsUint64(msg.staleTags, tag)
			errText := ""
			if stale {
				errText = msg.errText
				if errText == "" {
					errText = "stale delivery tag"
				}
			}
			rec.add(checker.Event{Kind: checker.KindSettleReturn, Client: c.id, Op: msg.op, Part: op.part + 1,
				Sub: op.subID, Tag: tag, Ok: !stale, Err: errText})
		}
	}
}

func containsUint64(xs []uint64, x uint64) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
