// Package storagetest holds the entry generators and comparisons that the
// storage suite and io/logstore's Committer tests share.
package storagetest

import (
	"bytes"
	"fmt"
	"math/rand/v2"

	"github.com/fibril-go/fibril/core"
)

// TB is what the comparisons need of a test: *testing.T and *rapid.T.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// EntryGen makes entries of every kind, with bodies, headers and targets.
type EntryGen struct {
	Rng        *rand.Rand
	Epoch      uint64
	payloadMax int
}

func NewEntryGen(seed uint64, payloadMax int) *EntryGen {
	return &EntryGen{Rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), Epoch: 1, payloadMax: payloadMax}
}

// Entries makes count entries from firstIndex.
func (g *EntryGen) Entries(firstIndex uint64, count int) []core.Entry {
	out := make([]core.Entry, count)
	for i := range out {
		out[i] = g.Entry(firstIndex + uint64(i))
	}
	return out
}

// Entry makes the entry at index.
func (g *EntryGen) Entry(index uint64) core.Entry {
	if g.Rng.IntN(50) == 0 {
		g.Epoch++ // epochs only move forward
	}
	e := core.Entry{Epoch: g.Epoch, Index: index, Offset: g.Rng.Uint64N(1 << 40)}
	target := &core.DLQTarget{Topic: "dead", Group: fmt.Sprintf("g%d", g.Rng.IntN(9))}
	switch g.Rng.IntN(10) {
	case 0:
		e.Kind = core.EntryDeclare
		e.Settings = &core.QueueSettings{DLQ: core.DLQPolicy{Kind: core.DLQCustom, Target: *target}, MaxRetries: 7, DefaultTTLMs: 60_000}
	case 1:
		e.Kind, e.Target = core.EntryGlobalDLQ, target
	case 2, 3, 4, 5:
		e.Kind = core.EntryPublish
		e.ExpiresAtMs, e.AtMs = g.Rng.Int64N(1<<40), g.Rng.Int64N(1<<40)
		e.Body = g.body()
	case 6:
		e.Kind, e.Tag, e.AtMs = core.EntryLease, g.Rng.Uint64(), g.Rng.Int64N(1<<40)
	case 7:
		e.Kind, e.Cause, e.Retries, e.AtMs = core.EntryRequeue, core.CauseNack, g.Rng.Uint32N(9), g.Rng.Int64N(1<<40)
	case 8:
		e.Kind, e.Cause, e.AtMs, e.Target = core.EntryDeadLetter, uint8(core.ReasonTerminalNack), g.Rng.Int64N(1<<40), target
	default:
		e.Kind = core.EntryAck
	}
	return e
}

func (g *EntryGen) body() *core.Body {
	b := &core.Body{PublishedMs: g.Rng.Int64N(1 << 40), ReceivedMs: g.Rng.Int64N(1 << 40)}
	if n := g.Rng.IntN(g.payloadMax + 1); n > 0 {
		b.Payload = make([]byte, n)
		for i := range b.Payload {
			b.Payload[i] = byte(g.Rng.Uint32())
		}
	}
	for i := range g.Rng.IntN(4) {
		b.Headers = append(b.Headers, core.Header{Key: fmt.Sprintf("k%d", i), Value: fmt.Sprintf("v%d", g.Rng.IntN(1000))})
	}
	if g.Rng.IntN(3) == 0 {
		b.ContentType = core.ContentType{Kind: core.ContentCustom, Custom: "application/x-test"}
	}
	return b
}

// PublishEntries makes count publish entries with payloadBytes each.
func PublishEntries(firstIndex uint64, count, payloadBytes int) []core.Entry {
	out := make([]core.Entry, count)
	payload := bytes.Repeat([]byte{0xAB}, payloadBytes)
	body := &core.Body{Payload: payload, Headers: []core.Header{{Key: "h", Value: "v"}}}
	for i := range out {
		index := firstIndex + uint64(i)
		out[i] = core.Entry{Epoch: 1, Index: index, Kind: core.EntryPublish, Offset: index - 1, Body: body}
	}
	return out
}

// SameEntries compares entries by their encoding, which is deterministic.
func SameEntries(t TB, got, want []core.Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(core.AppendEntry(nil, &got[i]), core.AppendEntry(nil, &want[i])) {
			t.Fatalf("entry %d (index %d) differs:\n got %+v\nwant %+v", i, want[i].Index, got[i], want[i])
		}
	}
}

// AtEpoch stamps entries with epoch (to follow on from a log's last entry).
func AtEpoch(entries []core.Entry, epoch uint64) []core.Entry {
	for i := range entries {
		entries[i].Epoch = epoch
	}
	return entries
}
