package ctl

// Admin commands about queues and their messages: admin queues, admin
// messages, admin topology, queue delete, queue purge.
//
// Invariants:
//   - A query parameter is sent only when its flag was given, so the server's
//     defaults and caps apply otherwise (docs/admin.md is their reference).
//   - The JSON types here follow the broker's answers (admin/queues.go,
//     admin/messages.go; e2e/ctl_test.go runs every command against a real
//     broker); unknown fields are ignored, missing ones read as zero.
//   - Counts of a queue are the loaded partitions' (an unloaded partition's
//     are null): the table says how many partitions were counted.

import (
	"encoding/base64"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

type dlqInfo struct {
	Policy     string `json:"policy"`
	Topic      string `json:"topic"`
	Group      string `json:"group"`
	MaxRetries uint32 `json:"max_retries"`
}

func (d dlqInfo) String() string {
	s := d.Policy
	if d.Policy == "custom" {
		s += ":" + queueName(d.Topic, d.Group)
	}
	if s == "" {
		s = "-"
	}
	return s
}

type partitionInfo struct {
	Partition  uint32 `json:"partition"`
	Loaded     bool   `json:"loaded"`
	Ready      *int64 `json:"ready"` // null while not loaded
	Inflight   *int64 `json:"inflight"`
	Delayed    *int64 `json:"delayed"`
	PendingDLQ *int64 `json:"pending_dlq"`
}

type queueInfo struct {
	Topic               string          `json:"topic"`
	Group               string          `json:"group"`
	PartitionCount      uint32          `json:"partition_count"`
	Ready               int64           `json:"ready"`
	Inflight            int64           `json:"inflight"`
	Delayed             int64           `json:"delayed"`
	PendingDLQ          int64           `json:"pending_dlq"`
	Consumers           int64           `json:"consumers"`
	DLQ                 dlqInfo         `json:"dlq"`
	DefaultMessageTTLMs int64           `json:"default_message_ttl_ms"` // 0: no TTL
	LoadedPartitions    uint32          `json:"loaded_partitions"`
	Partitions          []partitionInfo `json:"partitions"`
}

func adminQueuesCmd() *command {
	return &command{
		name: "queues", summary: "list the queues with their ready, inflight, delayed and pending-DLQ counts",
		action: func(r *run) error {
			var ans struct {
				Queues []queueInfo `json:"queues"`
			}
			raw, err := r.getJSON("/admin/api/queues", nil, &ans)
			if err != nil {
				return err
			}
			if r.g.json.value {
				r.printJSON(raw)
				return nil
			}
			sort.Slice(ans.Queues, func(i, j int) bool {
				return queueName(ans.Queues[i].Topic, ans.Queues[i].Group) < queueName(ans.Queues[j].Topic, ans.Queues[j].Group)
			})
			// LOADED: the partitions whose counts the totals sum (a listing
			// loads nothing; an unloaded partition's messages are not counted).
			t := newTable("QUEUE", "PARTITIONS", "LOADED", "READY", "INFLIGHT", "DELAYED", "PENDING_DLQ", "CONSUMERS", "DLQ", "MAX_RETRIES", "TTL_MS")
			for _, q := range ans.Queues {
				ttl := "-"
				if q.DefaultMessageTTLMs > 0 {
					ttl = strconv.FormatInt(q.DefaultMessageTTLMs, 10)
				}
				t.add(queueName(q.Topic, q.Group), q.PartitionCount, q.LoadedPartitions, q.Ready, q.Inflight, q.Delayed, q.PendingDLQ,
					q.Consumers, q.DLQ.String(), q.DLQ.MaxRetries, ttl)
			}
			t.print(r)
			if len(ans.Queues) == 0 {
				r.out("(no queues)\n")
			}
			return nil
		},
	}
}

type messageItem struct {
	Partition     uint32            `json:"partition"`
	Offset        uint64            `json:"offset"`
	State         string            `json:"state"`
	Headers       map[string]string `json:"headers"`
	PayloadLen    uint64            `json:"payload_len"`
	PayloadBase64 string            `json:"payload_base64"`
	DeliveryCount uint64            `json:"delivery_count"`
	NotBeforeMs   int64             `json:"not_before_ms"`
	LeaseUntilMs  int64             `json:"lease_deadline_ms"`
	ExpiresAtMs   int64             `json:"expires_at_ms"`
}

func adminMessagesCmd() *command {
	var group, status string
	var partition, from, limit, payloadLimit uint64
	var settled, payload bool
	return &command{
		name: "messages", summary: "browse one partition of a queue's messages (the API's filters and caps apply)",
		args: "<topic>", minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&group, "group", "", "queue group (namespace); empty is the default")
			fs.Uint64Var(&partition, "partition", 0, "the partition to browse (the broker's default: 0; the answer says how many there are)")
			fs.Uint64Var(&from, "from", 0, "first offset to show")
			fs.Uint64Var(&limit, "limit", 0, "most messages to show (the server caps it)")
			fs.BoolVar(&settled, "include-settled", false, "also show acked and dead-lettered messages")
			fs.BoolVar(&payload, "include-payload", false, "show payloads (a preview, --payload-limit-bytes each)")
			fs.Uint64Var(&payloadLimit, "payload-limit-bytes", 0, "bytes of each payload to show with --include-payload")
			fs.StringVar(&status, "status", "", "only messages in these states: a comma-separated list of ready, inflight, delayed, pending_dlq (default all four)")
		},
		action: func(r *run) error {
			q := url.Values{"topic": {r.args[0]}}
			if group != "" {
				q.Set("group", group)
			}
			for name, v := range map[string]uint64{"partition": partition, "from": from, "limit": limit, "payload-limit-bytes": payloadLimit} {
				if r.isSet(name) {
					q.Set(strings.ReplaceAll(name, "-", "_"), strconv.FormatUint(v, 10))
				}
			}
			if r.isSet("include-settled") {
				q.Set("include_settled", strconv.FormatBool(settled))
			}
			if r.isSet("include-payload") {
				q.Set("include_payload", strconv.FormatBool(payload))
			}
			if status != "" {
				q.Set("status", status)
			}
			var ans struct {
				Items          []messageItem `json:"items"`
				NextOffsetHint *uint64       `json:"next_offset_hint"`
				NextOffset     *uint64       `json:"next_offset"`
				Partition      uint32        `json:"partition"`
				PartitionCount uint32        `json:"partition_count"`
			}
			raw, err := r.getJSON("/admin/api/messages", q, &ans)
			if err != nil {
				return err
			}
			if r.g.json.value {
				r.printJSON(raw)
				return nil
			}
			header := []string{"PARTITION", "OFFSET", "STATE", "DELIVERIES", "BYTES", "NOT_BEFORE", "LEASE_UNTIL", "EXPIRES", "HEADERS"}
			if payload {
				header = append(header, "PAYLOAD")
			}
			t := newTable(header...)
			for _, m := range ans.Items {
				row := []any{m.Partition, m.Offset, m.State, m.DeliveryCount, m.PayloadLen,
					msTime(m.NotBeforeMs), msTime(m.LeaseUntilMs), msTime(m.ExpiresAtMs), headersText(m.Headers)}
				if payload {
					row = append(row, payloadPreview(m.PayloadBase64))
				}
				t.add(row...)
			}
			t.print(r)
			if len(ans.Items) == 0 {
				r.out("(no messages)\n")
			}
			if ans.PartitionCount > 1 {
				r.out("partition %d of partitions 0-%d (--partition)\n", ans.Partition, ans.PartitionCount-1)
			}
			// The hint equals next_offset once the page reached the end of
			// the partition: only a page that stopped short has a next page.
			if ans.NextOffsetHint != nil && (ans.NextOffset == nil || *ans.NextOffsetHint < *ans.NextOffset) {
				r.out("next: --from %d\n", *ans.NextOffsetHint)
			}
			return nil
		},
	}
}

func headersText(h map[string]string) string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + h[k]
	}
	return strings.Join(parts, ",")
}

// payloadPreview shows a payload as text when it is printable, else as hex.
func payloadPreview(b64 string) string {
	data, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return "(bad base64)"
	}
	printable := true
	for _, c := range string(data) {
		if c == '\uFFFD' || (c < 0x20 && c != ' ') {
			printable = false
			break
		}
	}
	if printable {
		return strconv.Quote(string(data))
	}
	return fmt.Sprintf("0x%x", data)
}

func adminTopologyCmd() *command {
	return &command{
		name: "topology", summary: "show the node and which node owns each queue partition",
		action: func(r *run) error {
			var ans struct {
				Node   map[string]any `json:"node"`
				Queues []struct {
					Topic      string `json:"topic"`
					Group      string `json:"group"`
					Partitions []struct {
						Partition uint32 `json:"partition"`
						Owner     any    `json:"owner"`
					} `json:"partitions"`
				} `json:"queues"`
				Streams []any `json:"streams"`
			}
			raw, err := r.getJSON("/admin/api/topology", nil, &ans)
			if err != nil {
				return err
			}
			if r.g.json.value {
				r.printJSON(raw)
				return nil
			}
			keys := make([]string, 0, len(ans.Node))
			for k := range ans.Node {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				r.out("node.%s: %v\n", k, ans.Node[k])
			}
			t := newTable("QUEUE", "PARTITION", "OWNER")
			for _, q := range ans.Queues {
				for _, p := range q.Partitions {
					t.add(queueName(q.Topic, q.Group), p.Partition, p.Owner)
				}
			}
			t.print(r)
			r.out("streams: %d\n", len(ans.Streams))
			return nil
		},
	}
}

func queueDeleteCmd() *command {
	var group string
	return &command{
		name: "delete", summary: "delete a queue and its messages (refused while messages are inflight)",
		args: "<topic>", minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&group, "group", "", "queue group (namespace); empty is the default")
		},
		action: func(r *run) error {
			raw, err := r.doJSON(http.MethodPost, "/admin/api/queues/delete", nil,
				map[string]string{"topic": r.args[0], "group": group}, nil)
			if err != nil {
				return err
			}
			if r.g.json.value {
				r.printJSON(raw)
				return nil
			}
			r.out("deleted %s\n", queueName(r.args[0], group))
			return nil
		},
	}
}

func queuePurgeCmd() *command {
	var group string
	return &command{
		name: "purge", summary: "drop every ready and delayed message of a queue (inflight ones still settle; the queue stays)",
		args: "<topic>", minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&group, "group", "", "queue group (namespace); empty is the default")
		},
		action: func(r *run) error {
			var ans struct {
				Purged uint64 `json:"purged"`
			}
			raw, err := r.doJSON(http.MethodPost, "/admin/api/queues/purge", nil,
				map[string]string{"topic": r.args[0], "group": group}, &ans)
			if err != nil {
				return err
			}
			if r.g.json.value {
				r.printJSON(raw)
				return nil
			}
			r.out("purged %d messages from %s\n", ans.Purged, queueName(r.args[0], group))
			return nil
		},
	}
}
