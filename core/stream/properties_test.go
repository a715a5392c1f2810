package stream

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/fibril-go/fibril/core"
	"pgregory.net/rapid"
)

// op is one drawn driver action, replayable exactly.
type op struct {
	kind int
	a, b uint64
}

const opKinds = 9

func drawOps(t *rapid.T) []op {
	n := rapid.IntRange(1, 150).Draw(t, "n")
	ops := make([]op, n)
	for i := range ops {
		ops[i] = op{kind: rapid.IntRange(0, opKinds-1).Draw(t, "kind"),
			a: uint64(rapid.IntRange(0, 40).Draw(t, "a")), b: uint64(rapid.IntRange(0, 40).Draw(t, "b"))}
	}
	return ops
}

func propertySettings() core.StreamSettings {
	return core.StreamSettings{Tier: core.TierSpeculative, PartitionCount: 1, MaxRecords: 7, MaxAgeMs: 5000}
}

func propertyConfig(c *Config) {
	c.SegmentRecordsMax, c.TailBytesMax, c.SubWindowMax, c.ReadBatchMax, c.CommitBatchMax = 3, 300, 3, 2, 2
}

// runOps drives a fresh partition through ops. onReady sees every Ready
// from the first; at(i) runs after op i.
func runOps(t tb, ops []op, onReady func(h *harness, in Input, rd *Ready), at func(i int, h *harness)) *harness {
	h := &harness{t: t, nowMs: 1_000}
	h.cfg = DefaultConfig(core.QueueID{Topic: "events"})
	propertyConfig(&h.cfg)
	p, err := NewPartition(h.cfg, propertySettings())
	if err != nil {
		t.Fatal(err)
	}
	h.p = p
	if onReady != nil {
		h.onReady = func(in Input, rd *Ready) { onReady(h, in, rd) }
	}
	h.step(&Tick{NowMs: h.nowMs})
	for i, o := range ops {
		switch o.kind {
		case 0, 1:
			body := &core.Body{Payload: []byte(strconv.Itoa(i)), Headers: []core.Header{{Key: "k", Value: strconv.Itoa(int(o.a % 3))}}}
			h.step(&Publish{NowMs: h.nowMs, Ref: uint64(i), Body: body})
		case 2:
			in := &Subscribe{NowMs: h.nowMs, Ref: uint64(i), SubID: o.a%4 + 1, AutoAck: o.b%2 == 0, Start: Start{Kind: StartKind(o.b % 5), Value: o.b}}
			if o.b%3 == 0 {
				in.DurableName = "d" + strconv.Itoa(int(o.a%2))
			}
			if o.b%4 == 1 {
				in.Filter = []Clause{{Key: "k", Pattern: "1*"}}
			}
			h.step(in)
		case 3:
			if sub := h.p.subs[o.a%4+1]; sub != nil && sub.next > 0 {
				h.step(&Ack{NowMs: h.nowMs, Ref: uint64(i), SubID: sub.id, Offsets: []uint64{o.b % sub.next}})
			}
		case 4:
			if sub := h.p.subs[o.a%4+1]; sub != nil && sub.window > 0 {
				h.step(&Credit{NowMs: h.nowMs, SubID: sub.id, Records: sub.window})
			}
		case 5:
			h.persist()
		case 6:
			h.advance(int64(o.a) * 200)
		case 7:
			if len(h.reads) > 0 {
				r := h.reads[0]
				h.reads = h.reads[1:]
				h.step(h.readDone(r))
			}
		case 8:
			if h.truncate != nil {
				h.saveSnapshot()
			} else {
				h.step(&Unsubscribe{NowMs: h.nowMs, Ref: uint64(i), SubID: o.a%4 + 1})
			}
		}
		if at != nil {
			at(i, h)
		}
	}
	return h
}

// encodeReady serialises every effect of a Ready, for byte comparisons.
func encodeReady(rd *Ready) []byte {
	var b []byte
	for i := range rd.Persist {
		b = core.AppendEntry(b, &rd.Persist[i])
	}
	for _, r := range rd.Replies {
		msg := ""
		if r.Err != nil {
			msg = r.Err.Error()
		}
		b = strconv.AppendQuote(b, "r"+strconv.FormatUint(r.Ref, 10)+","+strconv.Itoa(int(r.Kind))+","+strconv.FormatUint(r.Offset, 10)+msg)
	}
	for _, d := range rd.Deliveries {
		b = strconv.AppendQuote(b, "d"+strconv.FormatUint(d.SubID, 10)+","+strconv.FormatUint(d.Offset, 10)+","+
			strconv.FormatInt(d.AtMs, 10)+","+strconv.FormatBool(d.Speculative)+string(d.Body.Payload))
	}
	for _, r := range rd.Reads {
		b = strconv.AppendQuote(b, "read"+strconv.FormatUint(r.SubID, 10)+","+strconv.FormatUint(r.Token, 10)+","+
			strconv.FormatUint(r.FromIndex, 10)+","+strconv.Itoa(r.MaxEntries))
	}
	if rd.Truncate != nil {
		b = strconv.AppendUint(append(b, 't'), rd.Truncate.UpToIndex, 10)
		b = append(b, rd.Truncate.Snapshot...)
	}
	for _, n := range rd.Notices {
		b = strconv.AppendQuote(b, "n"+strconv.FormatUint(n.SubID, 10)+","+strconv.FormatUint(n.From, 10)+","+strconv.FormatUint(n.To, 10))
	}
	return strconv.AppendInt(b, rd.NextWakeMs, 10)
}

func TestDeterminism(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ops := drawOps(t)
		record := func() []byte {
			var out bytes.Buffer
			runOpsRecording(t, ops, &out)
			return out.Bytes()
		}
		if a, b := record(), record(); !bytes.Equal(a, b) {
			t.Fatal("the same inputs gave different Ready bytes")
		}
	})
}

// runOpsRecording is runOps with every Ready serialised into out.
func runOpsRecording(t tb, ops []op, out *bytes.Buffer) *harness {
	return runOps(t, ops, func(_ *harness, _ Input, rd *Ready) { out.Write(encodeReady(rd)) }, nil)
}

// TestSnapshotAtAnyPointPlusReplayEqualsLive: for any history, the live
// state's snapshot at any point (or, once storage truncated, the truncation
// snapshot storage holds) plus the entries after it rebuild the live state.
func TestSnapshotAtAnyPointPlusReplayEqualsLive(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ops := drawOps(t)
		cutAt := rapid.IntRange(0, len(ops)-1).Draw(t, "snapshotAt")
		var all []core.Entry
		var snap []byte
		var snapIndex uint64
		onReady := func(h *harness, in Input, rd *Ready) {
			all = append(all, rd.Persist...)
			if sd, ok := in.(*SnapshotDone); ok && snap != nil {
				snap, snapIndex = h.snap, sd.Index // storage now holds this one
			}
		}
		h := runOps(t, ops, onReady, func(i int, h *harness) {
			if i == cutAt {
				snap, snapIndex = h.p.Snapshot(), h.p.LastIndex()
			}
		})
		h.persist()
		var rest []core.Entry
		for _, e := range all {
			if e.Index > snapIndex {
				rest = append(rest, e)
			}
		}
		loaded, err := Load(h.cfg, snap, rest)
		if err != nil {
			t.Fatal(err)
		}
		if err := loaded.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(loaded.Snapshot(), h.p.Snapshot()) {
			t.Fatalf("snapshot at %d + %d entries differs from the live state", snapIndex, len(rest))
		}
		for name, next := range h.p.cursors {
			if got, _ := loaded.Cursor(name); got != next {
				t.Fatalf("cursor %q: loaded %d, live %d", name, got, next)
			}
		}
	})
}
