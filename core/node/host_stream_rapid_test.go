package node

import (
	"errors"
	"slices"
	"testing"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/core/stream"
	"pgregory.net/rapid"
)

// TestStreamHostRapid drives a StreamHost with random sessions' requests,
// storage answers (durability, reads in any order, truncations that fail
// or succeed) and bounces; the harness checks the invariants after every
// step, and this test that each subscription gets offsets in order with no
// gap, that credit never exceeds what was handed out, and that the Host's
// routing ends with the subscriptions.
func TestStreamHostRapid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		settings := core.StreamSettings{Tier: uint8(rapid.IntRange(0, 2).Draw(t, "tier")),
			MaxRecords: uint64(rapid.SampledFrom([]int{0, 6}).Draw(t, "maxRecords")), PartitionCount: 1}
		sh := newStreamHostHarness(t, settings)
		sh.autoPersist, sh.autoRead = false, false
		type subState struct {
			session     SessionID
			last        uint64 // last offset delivered (valid when any)
			any         bool
			outstanding int // delivered, not credited
			delivered   []uint64
		}
		subs := map[uint64]*subState{}
		nextSub := uint64(1)
		collect := func() {
			for _, env := range sh.take() {
				m, ok := env.Msg.(*StreamDeliveries)
				if !ok {
					continue
				}
				st := subs[m.SubID]
				if st == nil {
					t.Fatalf("deliveries for %d, not subscribed", m.SubID)
				}
				if env.To != SessionAddr(st.session) {
					t.Fatalf("deliveries of %d to %v", m.SubID, env.To)
				}
				for _, d := range m.Items {
					// Retention may clamp a subscription forward (a Notice):
					// offsets only grow, and by one unless records were dropped.
					if st.any && d.Offset <= st.last {
						t.Fatalf("sub %d: offset %d after %d", m.SubID, d.Offset, st.last)
					}
					if st.any && d.Offset != st.last+1 && settings.MaxRecords == 0 {
						t.Fatalf("sub %d: gap %d after %d with no retention", m.SubID, d.Offset, st.last)
					}
					st.last, st.any = d.Offset, true
					st.outstanding++
					st.delivered = append(st.delivered, d.Offset)
				}
			}
		}
		ids := func() []uint64 {
			out := make([]uint64, 0, len(subs))
			for id := range subs {
				out = append(out, id)
			}
			slices.Sort(out)
			return out
		}
		t.Repeat(map[string]func(*rapid.T){
			"subscribe": func(t *rapid.T) {
				id := nextSub
				nextSub++
				st := &subState{session: SessionID(rapid.IntRange(1, 3).Draw(t, "session"))}
				subs[id] = st
				in := &stream.Subscribe{SubID: id, Start: stream.Start{Kind: stream.StartKind(rapid.IntRange(0, 4).Draw(t, "start")),
					Value: uint64(rapid.IntRange(0, 20).Draw(t, "value"))}}
				if rapid.Bool().Draw(t, "durable?") {
					in.DurableName = rapid.SampledFrom([]string{"a", "b"}).Draw(t, "name")
				}
				sh.request(st.session, 1, in)
				if !sh.h.Partition().HasSubscription(id) {
					delete(subs, id)
				}
				collect()
			},
			"unsubscribe": func(t *rapid.T) {
				if len(subs) == 0 {
					t.Skip()
				}
				id := rapid.SampledFrom(ids()).Draw(t, "sub")
				sh.request(subs[id].session, 0, &stream.Unsubscribe{SubID: id})
				collect()
				delete(subs, id)
			},
			"publish": func(t *rapid.T) {
				sh.publish(9, uint64(rapid.IntRange(0, 1).Draw(t, "confirm")), "0123456789")
				collect()
			},
			"persist": func(t *rapid.T) {
				last := sh.h.Partition().LastIndex()
				if sh.durable == last {
					t.Skip()
				}
				sh.durable = uint64(rapid.IntRange(int(sh.durable)+1, int(last)).Draw(t, "upTo"))
				sh.step(&Persisted{NowMs: sh.now, UpToIndex: sh.durable})
				collect()
			},
			"credit": func(t *rapid.T) {
				if len(subs) == 0 {
					t.Skip()
				}
				id := rapid.SampledFrom(ids()).Draw(t, "sub")
				st := subs[id]
				if st.outstanding == 0 {
					t.Skip()
				}
				n := rapid.IntRange(1, st.outstanding).Draw(t, "records")
				st.outstanding -= n
				sh.request(st.session, 0, &stream.Credit{SubID: id, Records: n})
				collect()
			},
			"ack": func(t *rapid.T) {
				if len(subs) == 0 {
					t.Skip()
				}
				id := rapid.SampledFrom(ids()).Draw(t, "sub")
				st := subs[id]
				if len(st.delivered) == 0 {
					t.Skip()
				}
				sh.request(st.session, 0, &stream.Ack{SubID: id, Offsets: []uint64{rapid.SampledFrom(st.delivered).Draw(t, "offset")}})
				collect()
			},
			"read": func(t *rapid.T) {
				if len(sh.reads) == 0 {
					t.Skip()
				}
				i := rapid.IntRange(0, len(sh.reads)-1).Draw(t, "read")
				r := sh.reads[i]
				sh.reads = slices.Delete(sh.reads, i, i+1)
				if rapid.IntRange(0, 4).Draw(t, "fail?") == 0 {
					sh.step(&StreamReadDone{NowMs: sh.now, Token: r.Token, Err: core.ErrStorageBehind})
				} else {
					sh.answerRead(r)
				}
				collect()
			},
			"truncate": func(t *rapid.T) {
				s := sh.h.truncating
				if s == nil || sh.h.truncateRetryAtMs != 0 || s.Index > sh.durable {
					t.Skip()
				}
				if rapid.IntRange(0, 3).Draw(t, "fail?") == 0 {
					sh.step(&SnapshotDone{NowMs: sh.now, Index: s.Index, Err: errors.New("disk")})
					return
				}
				for i := range sh.log {
					if i <= s.Index {
						delete(sh.log, i)
					}
				}
				sh.step(&SnapshotDone{NowMs: sh.now, Index: s.Index})
				collect()
			},
			"tick": func(t *rapid.T) {
				sh.now += int64(rapid.SampledFrom([]int{1, 100, 1000}).Draw(t, "dt"))
				sh.step(&Tick{NowMs: sh.now})
				collect()
			},
			"bounce": func(t *rapid.T) {
				session := SessionID(rapid.IntRange(1, 3).Draw(t, "session"))
				sh.step(&Bounced{NowMs: sh.now, Envelope: Envelope{From: PartitionAddr(sh.h.id), To: SessionAddr(session),
					Msg: &StreamNotice{Stream: sh.h.id}}})
				for _, id := range ids() {
					if subs[id].session == session {
						delete(subs, id)
					}
				}
				collect()
			},
			"": func(t *rapid.T) {
				if got, want := sh.h.Partition().SubscriptionIDs(), ids(); !slices.Equal(got, want) {
					t.Fatalf("subscriptions %v, model %v", got, want)
				}
			},
		})
	})
}
