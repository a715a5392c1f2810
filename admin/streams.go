package admin

import (
	"context"
	"net/http"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/io/broker"
)

// GET|POST /admin/api/streams (SPEC 11): the declared streams and their
// settings, and an operator's declare. Invariants:
//   - the listing is the Node's catalogue (every declared stream, loaded or
//     not); offsets and subscription counts come from the runners'
//     observations (io/broker/admin_streams.go) and are null for a
//     partition that is not loaded or not observed yet: a listing never
//     loads or steps a partition;
//   - a create goes through the Node's DeclareStream, the path a client's
//     DECLARE_PLEXUS takes: the same settings again are a 200, other
//     settings or a queue's topic a 400 with the Node's reason; every
//     create is audited, refused or not;
//   - every call is bounded by queueCallTimeout (a 503, never a hang).

// streamsBackend is what these endpoints need of the broker.
type streamsBackend interface {
	ListStreams(ctx context.Context) ([]broker.StreamState, error)
	DeclareStream(ctx context.Context, topic string, settings core.StreamSettings) (bool, error)
}

// StreamJSON is one stream of GET /admin/api/streams. Records and
// Subscriptions sum the observed partitions.
type StreamJSON struct {
	Topic            string                `json:"topic"`
	PartitionCount   uint32                `json:"partition_count"`
	Durability       string                `json:"durability"`
	MaxAgeMs         uint64                `json:"max_age_ms"`
	MaxBytes         uint64                `json:"max_bytes"`
	MaxRecords       uint64                `json:"max_records"`
	LoadedPartitions int                   `json:"loaded_partitions"`
	Records          uint64                `json:"records"`
	Subscriptions    int64                 `json:"subscriptions"`
	Partitions       []StreamPartitionJSON `json:"partitions"`
}

// StreamPartitionJSON is one partition; the observed fields are null
// unless it is loaded and observed. Records is next_offset - oldest_offset
// (what retention keeps).
type StreamPartitionJSON struct {
	Partition     uint32  `json:"partition"`
	Loaded        bool    `json:"loaded"`
	OldestOffset  *uint64 `json:"oldest_offset"`
	NextOffset    *uint64 `json:"next_offset"`
	Records       *uint64 `json:"records"`
	Subscriptions *int64  `json:"subscriptions"`
}

// streamCreateBody is POST /admin/api/streams. Absent retention bounds are
// unbounded (0), an absent partition_count is 1, an absent durability is
// durable: DECLARE_PLEXUS's defaults.
type streamCreateBody struct {
	Topic          string  `json:"topic"`
	PartitionCount *uint32 `json:"partition_count"`
	Durability     string  `json:"durability"`
	MaxAgeMs       uint64  `json:"max_age_ms"`
	MaxBytes       uint64  `json:"max_bytes"`
	MaxRecords     uint64  `json:"max_records"`
}

var tierNames = map[uint8]string{core.TierEphemeral: "ephemeral", core.TierSpeculative: "speculative", core.TierDurable: "durable"}

func tierOf(name string) (uint8, bool) {
	if name == "" {
		return core.TierDurable, true
	}
	for t, n := range tierNames {
		if n == name {
			return t, true
		}
	}
	return 0, false
}

// streamJSON renders one stream.
func streamJSON(st *broker.StreamState) StreamJSON {
	s := st.Settings
	out := StreamJSON{Topic: st.Topic, PartitionCount: s.PartitionCount, Durability: tierNames[s.Tier],
		MaxAgeMs: s.MaxAgeMs, MaxBytes: s.MaxBytes, MaxRecords: s.MaxRecords,
		Partitions: make([]StreamPartitionJSON, 0, len(st.Parts))}
	for i := range st.Parts {
		p := &st.Parts[i]
		pj := StreamPartitionJSON{Partition: p.Partition, Loaded: p.Loaded}
		if p.Loaded {
			out.LoadedPartitions++
		}
		if p.Observed {
			records := p.Next - min(p.Oldest, p.Next)
			pj.OldestOffset, pj.NextOffset, pj.Records, pj.Subscriptions = &p.Oldest, &p.Next, &records, &p.Subscriptions
			out.Records += records
			out.Subscriptions += p.Subscriptions
		}
		out.Partitions = append(out.Partitions, pj)
	}
	return out
}

// listStreamsJSON is the listing's answer, shared with the SSE family.
func (s *Server) listStreamsJSON(ctx context.Context) (map[string]any, error) {
	b, err := backend[streamsBackend](s)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, queueCallTimeout)
	defer cancel()
	list, err := b.ListStreams(ctx)
	if err != nil {
		return nil, queueProblem(err)
	}
	out := make([]StreamJSON, 0, len(list))
	for i := range list {
		out = append(out, streamJSON(&list[i]))
	}
	return map[string]any{"streams": out}, nil
}

func (s *Server) listStreams(w http.ResponseWriter, r *http.Request) error {
	v, err := s.listStreamsJSON(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

func (s *Server) createStream(w http.ResponseWriter, r *http.Request) (err error) {
	var body streamCreateBody
	target := ""
	defer func() { s.audit(r, "stream.create", target, err, "") }()
	if err := readJSON(w, r, &body); err != nil {
		return err
	}
	target = body.Topic
	if body.Topic == "" {
		return problem(http.StatusBadRequest, "bad_name", "stream: topic is missing; name the stream's topic")
	}
	if core.ValidateName(body.Topic) != nil {
		return problem(http.StatusBadRequest, "bad_name",
			"stream: topic %q is not a valid name: 1-%d bytes of letters, digits, '.', '_', '-', no leading, trailing or doubled '.'", body.Topic, core.NameBytesMax)
	}
	settings := core.StreamSettings{PartitionCount: 1, MaxAgeMs: body.MaxAgeMs, MaxBytes: body.MaxBytes, MaxRecords: body.MaxRecords}
	if body.PartitionCount != nil {
		if *body.PartitionCount == 0 {
			return problem(http.StatusBadRequest, "bad_parameter", "partition_count must be at least 1 (omit it for 1)")
		}
		settings.PartitionCount = *body.PartitionCount
	}
	tier, ok := tierOf(body.Durability)
	if !ok {
		return problem(http.StatusBadRequest, "bad_parameter", "durability %q: want \"durable\" (the default), \"speculative\" or \"ephemeral\"", body.Durability)
	}
	settings.Tier = tier
	b, err := backend[streamsBackend](s)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), queueCallTimeout)
	defer cancel()
	created, err := b.DeclareStream(ctx, body.Topic, settings)
	if err != nil {
		return queueProblem(err)
	}
	list, err := b.ListStreams(ctx)
	if err != nil {
		return queueProblem(err)
	}
	status := http.StatusOK // the same settings again: idempotent, as DECLARE_PLEXUS
	if created {
		status = http.StatusCreated
	}
	for i := range list {
		if list[i].Topic == body.Topic {
			writeJSON(w, status, streamJSON(&list[i]))
			return nil
		}
	}
	return problem(http.StatusServiceUnavailable, "not_ready", "stream %q was declared but is not listed yet; GET /admin/api/streams shortly", body.Topic)
}

func init() {
	routeFamilies = append(routeFamilies, func(s *Server, mux *http.ServeMux) {
		mux.HandleFunc("GET /admin/api/streams", s.api(s.listStreams))
		mux.HandleFunc("POST /admin/api/streams", s.api(s.createStream))
	})
	eventFamilies["streams"] = func(s *Server, ctx context.Context) (any, error) { return s.listStreamsJSON(ctx) }
}
