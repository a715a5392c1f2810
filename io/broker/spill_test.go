package broker

import (
	"bytes"
	"strconv"
	"testing"
	"time"

	"github.com/fibril-go/fibril/transport/wire"
)

// waitFor polls cond for up to 5 s: the spill and the resident count follow
// durability reports on the runner goroutine. The caller checks afterwards.
func waitFor(cond func() bool) {
	for deadline := time.Now().Add(5 * time.Second); !cond() && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
}

// spillPayload is big enough for a blob file (logstore stores payloads of
// 256 bytes and more outside tidwall) and says which message it is.
func spillPayload(i int) []byte {
	return append([]byte(strconv.Itoa(i)+"|"), bytes.Repeat([]byte{byte('a' + i%26)}, 700)...)
}

// TestPayloadsOverTheBudgetAreReadBack: with no memory budget, every durable
// payload leaves memory and each delivery reads it back from the blob file,
// byte for byte, before and after a restart.
func TestPayloadsOverTheBudgetAreReadBack(t *testing.T) {
	const messages = 300
	dir := t.TempDir()
	b, addr := testBroker(t, dir, func(c *Config) { c.ResidentPayloadBytesMax = 0 })
	p := connect(t, addr)
	for i := 0; i < messages; i++ {
		id := p.request(wire.OpPublish, &wire.Publish{Topic: "big", RequireConfirm: true, Payload: spillPayload(i)})
		if f := p.reply(id); f.hdr.Opcode != wire.OpPublishOk {
			t.Fatalf("publish %d: %v %+v", i, f.hdr.Opcode, f.body)
		}
	}
	// The spill follows the durability report on the runner goroutine.
	waitFor(func() bool { return b.metrics.residentPayloadBytes.Load() == 0 })
	if got := b.metrics.residentPayloadBytes.Load(); got != 0 {
		t.Fatalf("%d payload bytes resident with a budget of 0", got)
	}
	p.subscribe("big", 0, 1000, false)
	seen := map[uint64][]byte{}
	for i := 0; i < messages/2; i++ {
		d := p.deliver()
		want := spillPayload(int(d.Offset))
		if !bytes.Equal(d.Payload, want) {
			t.Fatalf("offset %d: payload %q..., want %q...", d.Offset, d.Payload[:10], want[:10])
		}
		seen[d.Offset] = d.Payload
		p.ack("big", 0, d.DeliveryTag)
	}
	if got := b.metrics.payloadsRead.Load(); got < messages/2 {
		t.Fatalf("%d payloads read back, want at least %d", got, messages/2)
	}
	b.Close()

	// After a restart the rest come back stored from recovery and are read
	// back too (the unacked half of the first run's deliveries included).
	b2, addr2 := testBroker(t, dir, func(c *Config) { c.ResidentPayloadBytesMax = 0 })
	c := connect(t, addr2)
	c.subscribe("big", 0, 1000, false)
	for len(seen) < messages {
		d := c.deliver()
		if !bytes.Equal(d.Payload, spillPayload(int(d.Offset))) {
			t.Fatalf("after restart, offset %d: wrong payload", d.Offset)
		}
		seen[d.Offset] = d.Payload
		c.ack("big", 0, d.DeliveryTag)
	}
	if b2.metrics.payloadsRead.Load() == 0 {
		t.Fatal("recovered messages were not read back from the blob files")
	}
}

// TestBudgetKeepsTheHeadInMemory: under the budget nothing is spilled, and
// once past it each newly durable payload leaves memory (the older ones,
// delivered first, keep theirs); every spilled one is read back once.
func TestBudgetKeepsTheHeadInMemory(t *testing.T) {
	b, addr := testBroker(t, "", func(c *Config) { c.ResidentPayloadBytesMax = 100 * 710 })
	p := connect(t, addr)
	for i := 0; i < 150; i++ {
		id := p.request(wire.OpPublish, &wire.Publish{Topic: "q", RequireConfirm: true, Payload: spillPayload(i)})
		p.reply(id)
	}
	// Spilled payloads leave memory: about 100 of the 150 stay resident.
	waitFor(func() bool { return b.metrics.residentPayloadBytes.Load() <= 100*710 })
	resident := b.metrics.residentPayloadBytes.Load()
	if resident > 100*710 || resident < 90*700 {
		t.Fatalf("%d bytes resident; want about 100 payloads and at most %d bytes", resident, 100*710)
	}
	p.subscribe("q", 0, 1000, false)
	for i := 0; i < 150; i++ {
		d := p.deliver()
		if !bytes.Equal(d.Payload, spillPayload(int(d.Offset))) {
			t.Fatalf("offset %d: wrong payload", d.Offset)
		}
		p.ack("q", 0, d.DeliveryTag)
	}
	if reads := b.metrics.payloadsRead.Load(); reads < 45 || reads > 55 {
		t.Fatalf("%d payloads read back, want about 50 (the spilled ones, once each)", reads)
	}
	waitFor(func() bool { return b.metrics.residentPayloadBytes.Load() == 0 })
	if got := b.metrics.residentPayloadBytes.Load(); got != 0 {
		t.Fatalf("%d bytes resident after every message was acked", got)
	}
}

// TestStoredPayloadIsDeadLetteredWhole: a dead-letter copy of a message
// whose payload left memory carries the payload read back, into a queue
// whose own log stores it again.
func TestStoredPayloadIsDeadLetteredWhole(t *testing.T) {
	b, addr := testBroker(t, "", func(c *Config) { c.ResidentPayloadBytesMax = 0 })
	p := connect(t, addr)
	id := p.request(wire.OpDeclareQueue, &wire.DeclareQueue{Topic: "work",
		DLQPolicy: wire.Some(wire.DLQPolicy{Kind: wire.DLQCustom, Topic: "work-dlq"}), DLQRetriesMax: wire.Some[uint32](0)})
	if f := p.reply(id); f.hdr.Opcode != wire.OpDeclareQueueOk {
		t.Fatalf("declare: %v %+v", f.hdr.Opcode, f.body)
	}
	want := spillPayload(7)
	id = p.request(wire.OpPublish, &wire.Publish{Topic: "work", RequireConfirm: true, Payload: want})
	p.reply(id)
	waitFor(func() bool { return b.metrics.residentPayloadBytes.Load() == 0 })
	if b.metrics.residentPayloadBytes.Load() != 0 {
		t.Fatal("the payload was not spilled")
	}
	p.subscribe("work", 0, 1, false)
	d := p.deliver()
	p.nack("work", 0, true, wire.Optional[uint64]{}, d.DeliveryTag) // past max_retries 0
	p.subscribe("work-dlq", 0, 1, false)
	dl := p.deliver()
	if dl.Topic != "work-dlq" || !bytes.Equal(dl.Payload, want) {
		t.Fatalf("dead-letter copy on %s with payload %q..., want %q...", dl.Topic, dl.Payload[:8], want[:8])
	}
}
