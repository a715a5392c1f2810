package wire

// Invariants:
//   - Headers keep wire order, so a decoded body re-encodes byte for byte. The wire
//     says order carries no meaning and Fibril stores a map (last duplicate wins); Get
//     and Deduplicated give that map view without losing the original bytes.
//   - Keys starting with "fibril." or "stroma." are reserved for the system, except
//     "fibril.client." which the client libraries set (PROTOCOL.md §7.12).

import "strings"

// Reserved header prefixes (§7.12). The broker rejects a publish carrying a key with a
// reserved prefix unless the key starts with ReservedHeaderExemptPrefix.
const (
	ReservedHeaderPrefixFibril = "fibril."
	ReservedHeaderPrefixStroma = "stroma."
	ReservedHeaderExemptPrefix = "fibril.client."
)

// System headers the broker adds to deliveries (§5.8, §7.4).
const (
	HeaderRetries     = "fibril.retries"     // decimal retry count, only when > 0
	HeaderSpeculative = "fibril.speculative" // "1" on speculative-tier stream records

	HeaderDLQSourceTopic      = "stroma.dlq.source_topic"
	HeaderDLQSourceGroup      = "stroma.dlq.source_group" // only when the source has a group
	HeaderDLQSourceOffset     = "stroma.dlq.source_offset"
	HeaderDLQSourcePartition  = "stroma.dlq.source_partition" // ours: the partition the copy left
	HeaderDLQRetryCount       = "stroma.dlq.retry_count"
	HeaderDLQReason           = "stroma.dlq.reason" // "retries_exhausted", "expired", ...
	HeaderDLQDeadLetteredAtMs = "stroma.dlq.dead_lettered_at_ms"
)

// Headers is the wire's headers field: key/value pairs in wire order.
type Headers []KeyValue

// Get returns the value of the last entry with key, matching Fibril's map (last wins).
func (h Headers) Get(key string) (string, bool) {
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Key == key {
			return h[i].Value, true
		}
	}
	return "", false
}

// Deduplicated returns the headers Fibril would store: one entry per key, holding the
// last value, at the position of that last occurrence. It returns h itself (no copy)
// when there are no duplicates, which is the common case.
func (h Headers) Deduplicated() Headers {
	if !h.hasDuplicateKey() {
		return h
	}
	out := make(Headers, 0, len(h))
	for i, kv := range h {
		if !h[i+1:].hasKey(kv.Key) {
			out = append(out, kv)
		}
	}
	return out
}

func (h Headers) hasKey(key string) bool {
	for _, kv := range h {
		if kv.Key == key {
			return true
		}
	}
	return false
}

// hasDuplicateKey is quadratic on purpose: header lists are short, and a map would
// allocate on every publish.
func (h Headers) hasDuplicateKey() bool {
	for i, kv := range h {
		if h[i+1:].hasKey(kv.Key) {
			return true
		}
	}
	return false
}

// ReservedKey returns the first key, in wire order, that user code may not set (§7.12).
func (h Headers) ReservedKey() (string, bool) {
	for _, kv := range h {
		if IsReservedHeaderKey(kv.Key) {
			return kv.Key, true
		}
	}
	return "", false
}

// IsReservedHeaderKey reports whether key carries a system prefix (§7.12). The match is
// case-sensitive, as the spec speaks of keys "beginning with" the prefix.
func IsReservedHeaderKey(key string) bool {
	if strings.HasPrefix(key, ReservedHeaderExemptPrefix) {
		return false
	}
	return strings.HasPrefix(key, ReservedHeaderPrefixFibril) ||
		strings.HasPrefix(key, ReservedHeaderPrefixStroma)
}

func appendHeaders(dst []byte, h Headers) []byte { return appendList(dst, h, appendKeyValue) }

// headers is decodeList of keyValue written out: a function value passed
// to the generic decodeList makes the decoder escape to the heap, one
// allocation per decoded PUBLISH.
func (d *decoder) headers(field string) Headers {
	n := d.count(field, keyValueBytesMin)
	if n == 0 {
		return nil
	}
	items := make(Headers, 0, n)
	for range n {
		item := d.keyValue(field)
		if d.err != nil {
			return nil
		}
		items = append(items, item)
	}
	return items
}
