package node

import (
	"testing"

	"github.com/fibril-go/fibril/core"
)

// hostHarness drives one Host the way a driver would: it keeps the entries
// handed to storage, reports them durable (at once, or when told), collects
// the envelopes and checks the invariants after every step.
type hostHarness struct {
	t    testing.TB
	cfg  Config
	pcfg core.Config
	h    *Host
	// leaseExpiries sums Ready.LeaseExpiries.
	leaseExpiries uint64
	now           int64
	log           []core.Entry // entries after base
	base          uint64       // the partition's last index when loaded
	durable       uint64
	autoPersist   bool
	// stored, when set, is the storage's answer: the publishes of each
	// durable round whose payloads it can give back.
	stored bool
	// residentOthers is the other partitions' share of the broker-wide
	// resident total; the driver adds this Host's last report to it.
	residentOthers   int64
	residentThisLast int64

	out       []Envelope
	settled   []core.Settlement
	snapshots []*SnapshotRequest
	wakeMs    int64
}

func testHostConfig() Config {
	cfg := DefaultConfig()
	cfg.DeadLetterRetryMinMs = 10
	cfg.DeadLetterRetryMaxMs = 80
	cfg.DeadLettersInflightMax = 4
	return cfg
}

func testPartitionConfig(topic string) core.Config {
	pcfg := core.DefaultConfig(qid(topic, 0))
	pcfg.LeaseMs = 1000
	return pcfg
}

// deadLetterSettings sends every failed message to dlq, at once.
func deadLetterSettings() DeclareSettings {
	return DeclareSettings{DLQ: &core.DLQPolicy{Kind: core.DLQCustom, Target: core.DLQTarget{Topic: "dlq"}}, MaxRetries: u32(0)}
}

func newHostHarness(t testing.TB, cfg Config, pcfg core.Config, settings DeclareSettings) *hostHarness {
	t.Helper()
	p, err := core.NewPartition(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	return newHostHarnessFrom(t, cfg, pcfg, p, settings)
}

func newHostHarnessFrom(t testing.TB, cfg Config, pcfg core.Config, p *core.Partition, settings DeclareSettings) *hostHarness {
	t.Helper()
	hh := &hostHarness{t: t, cfg: cfg, pcfg: pcfg, now: 1_000_000, autoPersist: true, base: p.LastIndex()}
	hh.h = NewHost(cfg, p, LoadRequest{Queue: pcfg.Queue, Config: pcfg, Settings: settings})
	hh.durable = p.LastIndex()
	hh.step(&Tick{NowMs: hh.now})
	return hh
}

func (hh *hostHarness) step(in Input) *Ready {
	hh.t.Helper()
	rd := hh.h.Step(in)
	hh.collect(rd, in)
	if hh.autoPersist {
		hh.persist()
	}
	return rd
}

func (hh *hostHarness) collect(rd *Ready, in Input) {
	hh.t.Helper()
	for _, e := range rd.PersistEntries {
		if e.Index != hh.base+uint64(len(hh.log))+1 {
			hh.t.Fatalf("entry %d after %d", e.Index, len(hh.log))
		}
		hh.log = append(hh.log, e)
	}
	hh.out = append(hh.out, rd.Out...)
	hh.settled = append(hh.settled, rd.Settled...)
	hh.leaseExpiries += rd.LeaseExpiries
	if rd.Snapshot != nil {
		hh.snapshots = append(hh.snapshots, rd.Snapshot)
	}
	hh.wakeMs = rd.WakeMs
	hh.residentThisLast = rd.ResidentBytes
	if err := hh.h.CheckInvariants(); err != nil {
		hh.t.Fatalf("after %T: %v", in, err)
	}
	if rd.ResidentBytes != hh.h.Partition().ResidentPayloadBytes() {
		hh.t.Fatalf("resident bytes %d reported, partition holds %d", rd.ResidentBytes, hh.h.Partition().ResidentPayloadBytes())
	}
	if rd.WakeMs != 0 && rd.WakeMs < hh.now {
		hh.t.Fatalf("wake %d in the past (now %d)", rd.WakeMs, hh.now)
	}
}

// persist reports every entry durable.
func (hh *hostHarness) persist() {
	hh.t.Helper()
	for hh.durable < hh.h.Partition().LastIndex() {
		from := hh.durable
		hh.durable = hh.h.Partition().LastIndex()
		in := &Persisted{NowMs: hh.now, UpToIndex: hh.durable, ResidentTotalBytes: hh.residentOthers + hh.residentThisLast}
		if hh.stored {
			in.Stored = hh.storedIn(from, hh.durable)
		}
		hh.collect(hh.h.Step(in), in)
	}
}

// storedIn lists the payloads of the publish entries of one durable round
// (from, upTo] as stored at a made-up ref (file = offset/4 + 1), as a blob
// store would.
func (hh *hostHarness) storedIn(from, upTo uint64) []StoredPayload {
	var out []StoredPayload
	for _, e := range hh.log {
		if e.Kind == core.EntryPublish && e.Index > from && e.Index <= upTo && len(e.Body.Payload) > 0 {
			out = append(out, StoredPayload{Offset: e.Offset, Ref: core.PayloadRef{File: e.Offset/4 + 1, OffsetBytes: e.Offset, LengthBytes: uint32(len(e.Body.Payload))}})
		}
	}
	return out
}

func (hh *hostHarness) tick(ms int64) {
	hh.t.Helper()
	hh.now += ms
	hh.step(&Tick{NowMs: hh.now})
}

func (hh *hostHarness) request(session SessionID, token uint64, in core.Input) {
	hh.t.Helper()
	hh.deliver(SessionAddr(session), &Request{Token: token, Input: in})
}

func (hh *hostHarness) deliver(from Address, msg Message) {
	hh.t.Helper()
	hh.step(&Deliver{NowMs: hh.now, Envelope: Envelope{From: from, To: PartitionAddr(hh.pcfg.Queue), Msg: msg}})
}

func (hh *hostHarness) publish(session SessionID, token uint64, payload string) {
	hh.t.Helper()
	hh.request(session, token, &core.Publish{Confirm: token != 0, Body: &core.Body{Payload: []byte(payload)}})
}

func (hh *hostHarness) subscribe(session SessionID, subID uint64, prefetch uint32) {
	hh.t.Helper()
	hh.request(session, 1, &core.Subscribe{SubID: subID, Prefetch: prefetch})
}

// take returns the envelopes of type T sent since the last take of any
// type, and forgets all of them.
func take[T Message](hh *hostHarness) ([]T, []Address) {
	var msgs []T
	var to []Address
	for _, env := range hh.out {
		if m, ok := env.Msg.(T); ok {
			msgs = append(msgs, m)
			to = append(to, env.To)
		}
		// A batch of answers counts as its Responses, in order.
		if batch, ok := env.Msg.(*Responses); ok {
			for i := range batch.Items {
				if m, ok := Message(&batch.Items[i]).(T); ok {
					msgs = append(msgs, m)
					to = append(to, env.To)
				}
			}
		}
	}
	hh.out = nil
	return msgs, to
}

func deliveredTags(batches []*Deliveries) []uint64 {
	var tags []uint64
	for _, b := range batches {
		for _, d := range b.Items {
			tags = append(tags, d.Tag)
		}
	}
	return tags
}
