package core

import "strings"

// Name and header rules of SPEC §1 and PROTOCOL.md §7.12. They are checked at
// the edge of the core so that no invalid name or reserved header is ever
// written to a log.

// NameBytesMax bounds a topic or group name.
const NameBytesMax = 128

// ValidateName checks a topic or group name: 1-128 bytes of [a-z0-9._-], no
// leading or trailing '.', no "..". "_dlq.x" is valid.
func ValidateName(name string) error {
	if len(name) == 0 || len(name) > NameBytesMax {
		return ErrInvalidName
	}
	if name[0] == '.' || name[len(name)-1] == '.' || strings.Contains(name, "..") {
		return ErrInvalidName
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		isLower := c >= 'a' && c <= 'z'
		isDigit := c >= '0' && c <= '9'
		if !isLower && !isDigit && c != '.' && c != '_' && c != '-' {
			return ErrInvalidName
		}
	}
	return nil
}

// NormalizeGroup maps the two spellings of the default namespace, "" and
// "default", to "" (SPEC §1: group `default` and no group reach one queue).
func NormalizeGroup(group string) string {
	if group == "default" {
		return ""
	}
	return group
}

// IsReservedHeader says whether a user may not set key: `fibril.*` except
// `fibril.client.*`, and `stroma.*`.
func IsReservedHeader(key string) bool {
	if strings.HasPrefix(key, "stroma.") {
		return true
	}
	return strings.HasPrefix(key, "fibril.") && !strings.HasPrefix(key, "fibril.client.")
}

// System headers the broker adds (PROTOCOL.md §5.8, §7.4).
const (
	HeaderRetries         = "fibril.retries"
	HeaderDLQSourceTopic  = "stroma.dlq.source_topic"
	HeaderDLQSourceGroup  = "stroma.dlq.source_group"
	HeaderDLQSourceOffset = "stroma.dlq.source_offset"
	// HeaderDLQSourcePartition is ours (the original has none): without it
	// a replay into a partitioned source could only guess the partition.
	HeaderDLQSourcePartition  = "stroma.dlq.source_partition"
	HeaderDLQRetryCount       = "stroma.dlq.retry_count"
	HeaderDLQReason           = "stroma.dlq.reason"
	HeaderDLQDeadLetteredAtMs = "stroma.dlq.dead_lettered_at_ms"
)

// validateHeaders applies the reserved-prefix rule (except to the broker's own
// system publishes) and the size limits.
func validateHeaders(cfg *Config, headers []Header, system bool) *Error {
	if len(headers) > cfg.HeaderCountMax {
		return ErrHeadersTooLarge
	}
	bytes := 0
	for i := range headers {
		if !system && IsReservedHeader(headers[i].Key) {
			return ErrReservedHeader
		}
		bytes += len(headers[i].Key) + len(headers[i].Value)
	}
	if bytes > cfg.HeaderBytesMax {
		return ErrHeadersTooLarge
	}
	return nil
}
