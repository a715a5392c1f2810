package sim

import (
	"github.com/fibril-go/fibril/checker"
)

// The recorder keeps the run's history and the trace hash. Invariants:
//   - events get dense sequence numbers in recording order and the true time
//     of the moment they were recorded;
//   - the trace hash is FNV-1a 64 run over 64-bit words (each field of each
//     event as one word, strings byte by byte with their length first) plus
//     the run's header lines, so two runs with the same seed and build hash
//     equal exactly when their histories are identical.
type recorder struct {
	w       *World
	history checker.History
	hash    uint64
}

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// eventsPerMessageEstimate sizes the history up front: growing one large
// slice by doubling copied every event again and again, and that copying was
// a fifth of the simulator's time. Seeds 1-300, plain and swarm, recorded
// at most 12.8 events per message beyond the first 1024 (8 typically):
// at 16 the unused part was a tenth of the simulator's allocated bytes.
const eventsPerMessageEstimate = 13

func newRecorder(w *World) *recorder {
	wl := &w.scenario.Workload
	estimate := eventsPerMessageEstimate*wl.Producers*wl.MessagesPerProducer + 1024
	r := &recorder{w: w, hash: fnvOffset64}
	r.history.Events = make([]checker.Event, 0, estimate)
	return r
}

func (r *recorder) word(x uint64) {
	r.hash = (r.hash ^ x) * fnvPrime64
}

func (r *recorder) str(s string) {
	r.word(uint64(len(s)))
	h := r.hash
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime64
	}
	r.hash = h
}

func flag(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// hashLine mixes a header line (scenario, faults) into the trace hash.
func (r *recorder) hashLine(s string) { r.str(s) }

func (r *recorder) add(e checker.Event) {
	e.Seq = uint64(len(r.history.Events) + 1)
	e.AtMs = r.w.nowMs
	r.history.Events = append(r.history.Events, e)
	r.hashEvent(&r.history.Events[len(r.history.Events)-1])
}

func (r *recorder) finish() *checker.History { return &r.history }

func (r *recorder) hashEvent(e *checker.Event) {
	r.word(e.Seq)
	r.word(uint64(e.AtMs))
	r.word(uint64(e.Kind))
	r.word(uint64(e.Node)<<32 | uint64(e.Client))
	r.word(e.Op)
	r.word(uint64(e.Part))
	r.word(e.MsgID)
	r.word(e.Offset)
	r.word(e.Tag)
	r.word(e.Sub)
	r.word(uint64(e.Retries))
	r.word(e.Index)
	r.word(e.Index2)
	r.word(uint64(e.NowMs))
	r.word(e.Step)
	r.word(flag(e.Confirm) | flag(e.HasTTL)<<1 | flag(e.AutoAck)<<2 | flag(e.Ok)<<3 |
		uint64(e.Action)<<8 | uint64(e.EntryKind)<<16 | uint64(e.Cause)<<24 | uint64(e.Prefetch)<<32)
	r.word(uint64(e.TTLMs))
	r.word(uint64(e.NotBeforeMs))
	r.word(uint64(e.AtMs2))
	r.str(e.Err)
	r.str(e.Trigger)
	r.str(e.Outcome)
	r.str(e.Reason)
	r.word(uint64(len(e.Headers)))
	for _, h := range e.Headers {
		r.str(h.Key)
		r.str(h.Value)
	}
	r.str(e.GotHash)
	r.str(e.WantHash)
	r.str(e.Text)
	if len(e.Assigned)+len(e.Added)+len(e.Revoked) == 0 {
		return // events without cohort lists hash as they did before them
	}
	for _, list := range [...][]uint32{e.Assigned, e.Added, e.Revoked} {
		r.word(uint64(len(list)))
		for _, x := range list {
			r.word(uint64(x))
		}
	}
}
