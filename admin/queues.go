package admin

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibril-go/fibril/core"
	"github.com/fibril-go/fibril/io/broker"
)

// Queue operations (issue 12, SPEC 11): list, create, delete, purge, an
// operator's test publish, the topology, and the per-queue gauges on
// /metrics. Invariants:
//   - every change is decided by the broker's machines (io/broker
//     admin_queueops.go reaches them with Broker.Call); this file checks
//     the input, maps answers to JSON and refusals to Problems, and audits
//     every mutation;
//   - a listing never loads a partition: an unloaded one says loaded:false
//     and has no counts (null), so listing 10,000 queues costs a read of
//     the catalogue and of the loaded partitions' atomics;
//   - every call is bounded by queueCallTimeout: a machine that does not
//     answer is a 503, never a hung request.

// queueCallTimeout bounds one operator request to the broker.
const queueCallTimeout = 25 * time.Second // below the server's 30 s write timeout: the 503 still goes out

// queueBackend is what these endpoints need of the broker.
type queueBackend interface {
	ListQueues(ctx context.Context) (broker.QueueListing, error)
	Queue(ctx context.Context, topic, group string) (broker.QueueStatus, error)
	DeclareQueue(ctx context.Context, d broker.QueueDeclare) (bool, error)
	DeleteQueue(ctx context.Context, topic, group string) error
	PurgeQueue(ctx context.Context, topic, group string) (uint64, error)
	AdminPublish(ctx context.Context, topic, group string, partition uint32, payload []byte, ct core.ContentType) (core.QueueID, uint64, error)
	NodeInfo() broker.NodeInfo
	DefaultMaxRetries() uint32
	QueueGauges(dst []broker.QueueGauge) []broker.QueueGauge
}

// QueueJSON is the Queue shape of the ops contract.
type QueueJSON struct {
	Topic            string          `json:"topic"`
	Group            string          `json:"group"`
	PartitionCount   uint32          `json:"partition_count"`
	Ready            int64           `json:"ready"`
	Inflight         int64           `json:"inflight"`
	Delayed          int64           `json:"delayed"`
	PendingDLQ       int64           `json:"pending_dlq"`
	Consumers        int64           `json:"consumers"`
	PublishRate      float64         `json:"publish_rate_per_sec"`
	DeliverRate      float64         `json:"deliver_rate_per_sec"`
	DLQ              DLQJSON         `json:"dlq"`
	DefaultTTLMs     int64           `json:"default_message_ttl_ms"`
	LoadedPartitions int             `json:"loaded_partitions"`
	Partitions       []PartitionJSON `json:"partitions"`
}

// DLQJSON is a queue's dead-letter settings.
type DLQJSON struct {
	Policy     string `json:"policy"`
	Topic      string `json:"topic,omitempty"`
	Group      string `json:"group,omitempty"`
	MaxRetries uint32 `json:"max_retries"`
}

// PartitionJSON is one partition; counts are null when it is not loaded.
type PartitionJSON struct {
	Partition  uint32 `json:"partition"`
	Loaded     bool   `json:"loaded"`
	Ready      *int64 `json:"ready"`
	Inflight   *int64 `json:"inflight"`
	Delayed    *int64 `json:"delayed"`
	PendingDLQ *int64 `json:"pending_dlq"`
	Consumers  *int64 `json:"consumers"`
}

func policyName(k core.DLQPolicyKind) string {
	switch k {
	case core.DLQGlobal:
		return "global"
	case core.DLQCustom:
		return "custom"
	}
	return "discard"
}

// queueJSON renders a broker QueueStatus (defaults filled in).
func queueJSON(q *broker.QueueStatus, defaultRetries uint32) QueueJSON {
	out := QueueJSON{Topic: q.Topic, Group: q.Group, PartitionCount: q.Partitions, Partitions: []PartitionJSON{}}
	out.DLQ = DLQJSON{Policy: "discard", MaxRetries: defaultRetries}
	if q.DLQ != nil {
		out.DLQ.Policy = policyName(q.DLQ.Kind)
		if q.DLQ.Kind == core.DLQCustom {
			out.DLQ.Topic, out.DLQ.Group = q.DLQ.Target.Topic, q.DLQ.Target.Group
		}
	}
	if q.MaxRetries != nil {
		out.DLQ.MaxRetries = *q.MaxRetries
	}
	if q.DefaultTTLMs != nil {
		out.DefaultTTLMs = *q.DefaultTTLMs
	}
	for i := range q.Parts {
		p := &q.Parts[i]
		pj := PartitionJSON{Partition: p.Partition, Loaded: p.Loaded}
		if p.Loaded {
			out.LoadedPartitions++
			out.Ready += p.Ready
			out.Inflight += p.Inflight
			out.Delayed += p.Delayed
			out.PendingDLQ += p.PendingDLQ
			out.Consumers += p.Consumers
			out.PublishRate += p.PublishRatePerSec
			out.DeliverRate += p.DeliverRatePerSec
			pj.Ready, pj.Inflight, pj.Delayed, pj.PendingDLQ, pj.Consumers = &p.Ready, &p.Inflight, &p.Delayed, &p.PendingDLQ, &p.Consumers
		}
		out.Partitions = append(out.Partitions, pj)
	}
	return out
}

// queueRef is the {topic, group} body of delete and purge.
type queueRef struct {
	Topic string `json:"topic"`
	Group string `json:"group"`
}

// createBody is POST /admin/api/queues.
type createBody struct {
	Topic          string    `json:"topic"`
	Group          string    `json:"group"`
	PartitionCount *uint32   `json:"partition_count"`
	Policy         string    `json:"policy"`
	Target         *queueRef `json:"target"`
	MaxRetries     *uint32   `json:"max_retries"`
	DefaultTTLMs   *int64    `json:"default_message_ttl_ms"`
}

// publishBody is POST /admin/api/publish.
type publishBody struct {
	Topic       string  `json:"topic"`
	Group       string  `json:"group"`
	Partition   *uint32 `json:"partition"`
	Text        *string `json:"text"`
	ContentType string  `json:"content_type"`
}

// checkQueueName validates a topic and group as the core does (core/names.go).
func checkQueueName(what, topic, group string) error {
	if topic == "" {
		return problem(http.StatusBadRequest, "bad_name", "%s: topic is missing; name the queue's topic", what)
	}
	if err := core.ValidateName(topic); err != nil {
		return problem(http.StatusBadRequest, "bad_name",
			"%s: topic %q is not a valid name: 1-%d bytes of letters, digits, '.', '_', '-', no leading, trailing or doubled '.'", what, topic, core.NameBytesMax)
	}
	if g := core.NormalizeGroup(group); g != "" {
		if err := core.ValidateName(g); err != nil {
			return problem(http.StatusBadRequest, "bad_name", "%s: group %q is not a valid name (as for topics; \"\" or \"default\" is the default group)", what, group)
		}
	}
	return nil
}

// queueProblem maps what the broker answered to a Problem.
func queueProblem(err error) error {
	var op *broker.QueueOpError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &op):
		switch op.Kind {
		case broker.QueueNotFound:
			return problem(http.StatusNotFound, "not_found", "%s; GET /admin/api/queues lists the queues", op.Message)
		case broker.QueueInUse:
			return problem(http.StatusConflict, "in_use", "%s", op.Message)
		case broker.QueueBusy:
			return problem(http.StatusConflict, "conflict", "%s", op.Message)
		case broker.QueueBadInput:
			return problem(http.StatusBadRequest, "bad_parameter", "%s", op.Message)
		default:
			return problem(http.StatusServiceUnavailable, "not_ready", "the broker cannot do this now (%s); retry shortly", op.Message)
		}
	case errors.Is(err, broker.ErrNoSuchMachine):
		return problem(http.StatusServiceUnavailable, "not_ready", "the partition went away during the request (unloaded or deleted); retry")
	case errors.Is(err, context.DeadlineExceeded):
		return problem(http.StatusServiceUnavailable, "not_ready", "the broker did not answer within %s; retry, and check the broker's log", queueCallTimeout)
	}
	return err
}

func init() {
	routeFamilies = append(routeFamilies, func(s *Server, mux *http.ServeMux) {
		mux.HandleFunc("GET /admin/api/queues", s.api(s.listQueues))
		mux.HandleFunc("POST /admin/api/queues", s.api(s.createQueue))
		mux.HandleFunc("POST /admin/api/queues/delete", s.api(s.deleteQueue))
		mux.HandleFunc("POST /admin/api/queues/purge", s.api(s.purgeQueue))
		mux.HandleFunc("POST /admin/api/publish", s.api(s.adminPublish))
		mux.HandleFunc("GET /admin/api/topology", s.api(s.topology))
	})
}

func (s *Server) listQueues(w http.ResponseWriter, r *http.Request) error {
	out, err := s.queueListing(r.Context()) // queues_dash.go: the events family serves the same
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) createQueue(w http.ResponseWriter, r *http.Request) (err error) {
	var body createBody
	target := ""
	defer func() { s.audit(r, "queue.create", target, err, "") }()
	if err := readJSON(w, r, &body); err != nil {
		return err
	}
	target = body.Topic + "/" + groupName(core.NormalizeGroup(body.Group))
	if err := checkQueueName("queue", body.Topic, body.Group); err != nil {
		return err
	}
	d := broker.QueueDeclare{Topic: body.Topic, Group: body.Group, MaxRetries: body.MaxRetries, DefaultTTLMs: body.DefaultTTLMs}
	if body.PartitionCount != nil {
		if *body.PartitionCount == 0 {
			return problem(http.StatusBadRequest, "bad_parameter", "partition_count must be at least 1 (omit it for 1)")
		}
		d.PartitionCount = *body.PartitionCount
	}
	if body.DefaultTTLMs != nil && *body.DefaultTTLMs < 0 {
		return problem(http.StatusBadRequest, "bad_parameter", "default_message_ttl_ms must be 0 (no TTL) or a positive number of milliseconds")
	}
	switch body.Policy {
	case "":
		if body.Target != nil {
			return problem(http.StatusBadRequest, "bad_parameter", "target is only for policy \"custom\"; set policy to \"custom\" or drop target")
		}
	case "discard", "global":
		if body.Target != nil {
			return problem(http.StatusBadRequest, "bad_parameter", "target is only for policy \"custom\", not %q", body.Policy)
		}
		kind := core.DLQDiscard
		if body.Policy == "global" {
			kind = core.DLQGlobal
		}
		d.DLQ = &core.DLQPolicy{Kind: kind}
	case "custom":
		if body.Target == nil {
			return problem(http.StatusBadRequest, "bad_parameter", "policy \"custom\" needs a target {\"topic\", \"group\"}")
		}
		if err := checkQueueName("target", body.Target.Topic, body.Target.Group); err != nil {
			return err
		}
		d.DLQ = &core.DLQPolicy{Kind: core.DLQCustom, Target: core.DLQTarget{Topic: body.Target.Topic, Group: core.NormalizeGroup(body.Target.Group)}}
	default:
		return problem(http.StatusBadRequest, "bad_parameter", "policy %q: want \"discard\", \"global\" or \"custom\"", body.Policy)
	}
	b, err := backend[queueBackend](s)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), queueCallTimeout)
	defer cancel()
	created, err := b.DeclareQueue(ctx, d)
	if err != nil {
		return queueProblem(err)
	}
	q, err := b.Queue(ctx, body.Topic, body.Group)
	if err != nil {
		return queueProblem(err)
	}
	status := http.StatusOK // a re-declare: the settings given were merged, as DECLARE_QUEUE does
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, queueJSON(&q, b.DefaultMaxRetries()))
	return nil
}

// readQueueRef reads and checks a {topic, group} body.
func readQueueRef(w http.ResponseWriter, r *http.Request, what string) (queueRef, error) {
	var ref queueRef
	if err := readJSON(w, r, &ref); err != nil {
		return ref, err
	}
	return ref, checkQueueName(what, ref.Topic, ref.Group)
}

func (s *Server) deleteQueue(w http.ResponseWriter, r *http.Request) (err error) {
	target := ""
	defer func() { s.audit(r, "queue.delete", target, err, "") }()
	ref, err := readQueueRef(w, r, "delete")
	target = ref.Topic + "/" + groupName(core.NormalizeGroup(ref.Group))
	if err != nil {
		return err
	}
	b, err := backend[queueBackend](s)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), queueCallTimeout)
	defer cancel()
	if err := b.DeleteQueue(ctx, ref.Topic, ref.Group); err != nil {
		return queueProblem(err)
	}
	writeJSON(w, http.StatusOK, map[string]any{"deleted": true})
	return nil
}

func (s *Server) purgeQueue(w http.ResponseWriter, r *http.Request) (err error) {
	target, detail := "", ""
	defer func() { s.audit(r, "queue.purge", target, err, detail) }()
	ref, err := readQueueRef(w, r, "purge")
	target = ref.Topic + "/" + groupName(core.NormalizeGroup(ref.Group))
	if err != nil {
		return err
	}
	b, err := backend[queueBackend](s)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), queueCallTimeout)
	defer cancel()
	n, err := b.PurgeQueue(ctx, ref.Topic, ref.Group)
	detail = fmt.Sprintf("purged %d", n)
	if err != nil {
		return queueProblem(err)
	}
	writeJSON(w, http.StatusOK, map[string]any{"purged": n})
	return nil
}

// contentTypeOf maps a publish's content_type to the wire's content kind.
func contentTypeOf(ct string) (core.ContentType, error) {
	switch strings.ToLower(strings.TrimSpace(ct)) {
	case "", "text", "text/plain":
		return core.ContentType{Kind: core.ContentText}, nil
	case "json", "application/json":
		return core.ContentType{Kind: core.ContentJSON}, nil
	case "msgpack", "application/msgpack", "application/x-msgpack":
		return core.ContentType{Kind: core.ContentMsgpack}, nil
	}
	if i := strings.IndexByte(ct, '/'); i <= 0 || i == len(ct)-1 || len(ct) > 255 || strings.ContainsAny(ct, " \t\r\n") {
		return core.ContentType{}, problem(http.StatusBadRequest, "bad_parameter",
			"content_type %q: want text/plain (the default), application/json, application/msgpack or another type/subtype", ct)
	}
	return core.ContentType{Kind: core.ContentCustom, Custom: ct}, nil
}

func (s *Server) adminPublish(w http.ResponseWriter, r *http.Request) (err error) {
	var body publishBody
	target, detail := "", ""
	defer func() { s.audit(r, "queue.publish", target, err, detail) }()
	if err := readJSON(w, r, &body); err != nil {
		return err
	}
	target = body.Topic + "/" + groupName(core.NormalizeGroup(body.Group))
	if err := checkQueueName("publish", body.Topic, body.Group); err != nil {
		return err
	}
	if body.Text == nil {
		return problem(http.StatusBadRequest, "bad_parameter", "text is missing: send the message's payload as a string in \"text\"")
	}
	ct, err := contentTypeOf(body.ContentType)
	if err != nil {
		return err
	}
	var partition uint32
	if body.Partition != nil {
		partition = *body.Partition
	}
	b, err := backend[queueBackend](s)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), queueCallTimeout)
	defer cancel()
	id, offset, err := b.AdminPublish(ctx, body.Topic, body.Group, partition, []byte(*body.Text), ct)
	if err != nil {
		return queueProblem(err)
	}
	detail = fmt.Sprintf("partition %d offset %d", id.Partition, offset)
	writeJSON(w, http.StatusOK, map[string]any{"partition": id.Partition, "offset": offset})
	return nil
}

// topologyPartition is one partition and its owner (this broker).
type topologyPartition struct {
	Partition uint32 `json:"partition"`
	Owner     string `json:"owner"`
}

// topologyEntry is a queue (Group always present, "" for the default group,
// as in GET /admin/api/queues) or a stream (no group).
type topologyEntry struct {
	Topic      string              `json:"topic"`
	Group      *string             `json:"group,omitempty"`
	Partitions []topologyPartition `json:"partitions"`
}

func (s *Server) topology(w http.ResponseWriter, r *http.Request) error {
	b, err := backend[queueBackend](s)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), queueCallTimeout)
	defer cancel()
	list, err := b.ListQueues(ctx)
	if err != nil {
		return queueProblem(err)
	}
	info := b.NodeInfo()
	owner := hex.EncodeToString(list.OwnerID[:])
	entry := func(topic string, group *string, n uint32) topologyEntry {
		e := topologyEntry{Topic: topic, Group: group, Partitions: make([]topologyPartition, 0, n)}
		for p := range n {
			e.Partitions = append(e.Partitions, topologyPartition{Partition: p, Owner: owner})
		}
		return e
	}
	queues := make([]topologyEntry, 0, len(list.Queues))
	for _, q := range list.Queues {
		group := q.Group
		queues = append(queues, entry(q.Topic, &group, q.Partitions))
	}
	streams := make([]topologyEntry, 0, len(list.Streams))
	for _, st := range list.Streams {
		streams = append(streams, entry(st.Topic, nil, st.Partitions))
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"node": map[string]any{"name": info.Name, "advertise_address": fmt.Sprintf("%s:%d", info.AdvertiseHost, info.AdvertisePort),
			"owner_id": owner, "standalone": true},
		"queues": queues, "streams": streams,
	})
	return nil
}

// queueCollector exposes fibril_queue_{ready,inflight} per loaded
// partition, read from the runners' atomics at scrape time.
type queueCollector struct{ server *Server }

var (
	queueReadyDesc = prometheus.NewDesc("fibril_queue_ready", "Ready messages of a loaded queue partition (admin.metrics_per_channel).",
		[]string{"topic", "group", "partition"}, nil)
	queueInflightDesc = prometheus.NewDesc("fibril_queue_inflight", "Inflight (leased) messages of a loaded queue partition (admin.metrics_per_channel).",
		[]string{"topic", "group", "partition"}, nil)
)

func (queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueReadyDesc
	ch <- queueInflightDesc
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.server.attached()
	if src == nil {
		return
	}
	b, ok := src.(queueBackend)
	if !ok {
		return
	}
	for _, g := range b.QueueGauges(nil) {
		part := fmt.Sprint(g.Queue.Partition)
		ch <- prometheus.MustNewConstMetric(queueReadyDesc, prometheus.GaugeValue, float64(g.Ready), g.Queue.Topic, g.Queue.Group, part)
		ch <- prometheus.MustNewConstMetric(queueInflightDesc, prometheus.GaugeValue, float64(g.Inflight), g.Queue.Topic, g.Queue.Group, part)
	}
}
