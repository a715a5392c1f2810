package client

// Message builders and client-side checks of names and headers.
//
// Invariants:
//   - A message that fails a local check (reserved header, bad JSON value) is
//     never sent: Publish* return the error and no frame leaves.
//   - Names follow SPEC §1: 1-128 bytes of [a-z0-9._-], no leading or trailing '.',
//     no "..". The group "default" and "" are the same namespace and travel as
//     an absent group.

import (
	"encoding/json"
	"fmt"

	"github.com/fibril-go/fibril/transport/wire"
)

// nameBytesMax bounds topic and group names (SPEC §1).
const nameBytesMax = 128

// Message is a message to publish, built with Text, JSON, Raw or Custom and
// refined with Header and PartitionKey. A Message may be published many times;
// do not modify it while a publish is in progress.
type Message struct {
	payload      []byte
	contentType  wire.ContentType
	headers      wire.Headers
	partitionKey []byte
	hasKey       bool
	err          error // a builder failure, reported by Publish*
}

// Text is a UTF-8 text message (content type text/plain; charset=utf-8).
func Text(s string) *Message {
	return &Message{payload: []byte(s), contentType: wire.ContentType{Kind: wire.ContentText}}
}

// JSON marshals v with encoding/json (content type application/json). A marshal
// error is returned by the publish call.
func JSON(v any) *Message {
	payload, err := json.Marshal(v)
	m := &Message{payload: payload, contentType: wire.ContentType{Kind: wire.ContentJSON}}
	if err != nil {
		m.err = fmt.Errorf("%w: JSON message: %w", ErrInvalidArgument, err)
	}
	return m
}

// Raw is an opaque payload with no content type.
func Raw(b []byte) *Message {
	return &Message{payload: b}
}

// Custom is a payload with an explicit MIME type; well-known types map to their
// wire kinds (application/json becomes json) as the broker would map them.
func Custom(mimeType string, b []byte) *Message {
	return &Message{payload: b, contentType: wire.ClassifyContentType(mimeType)}
}

// Header sets a header (replacing an earlier value for the same key) and returns
// m. Keys starting with fibril. (other than fibril.client.) or stroma. are
// refused at publish with a *ReservedHeaderError.
func (m *Message) Header(key, value string) *Message {
	for i := range m.headers {
		if m.headers[i].Key == key {
			m.headers[i].Value = value
			return m
		}
	}
	m.headers = append(m.headers, wire.KeyValue{Key: key, Value: value})
	return m
}

// PartitionKey routes the message by FNV-1a-64 of key modulo the partition
// count, so every message with one key lands on one partition, in order.
func (m *Message) PartitionKey(key string) *Message {
	m.partitionKey = []byte(key)
	m.hasKey = true
	return m
}

// validate runs the local checks before anything is sent.
func (m *Message) validate() error {
	if m == nil {
		return fmt.Errorf("%w: nil message", ErrInvalidArgument)
	}
	if m.err != nil {
		return m.err
	}
	if key, ok := m.headers.ReservedKey(); ok {
		return &ReservedHeaderError{Key: key}
	}
	return nil
}

func (m *Message) partitionKeyOpt() wire.Optional[[]byte] {
	if !m.hasKey {
		return wire.Optional[[]byte]{}
	}
	return wire.Some(m.partitionKey)
}

// validateName checks a topic or group name (SPEC §1).
func validateName(kind, name string) error {
	if len(name) == 0 || len(name) > nameBytesMax {
		return fmt.Errorf("%w: %s %q must be 1-%d bytes", ErrInvalidName, kind, name, nameBytesMax)
	}
	if name[0] == '.' || name[len(name)-1] == '.' {
		return fmt.Errorf("%w: %s %q starts or ends with '.'", ErrInvalidName, kind, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		valid := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !valid {
			return fmt.Errorf("%w: %s %q has %q; use [a-z0-9._-]", ErrInvalidName, kind, name, c)
		}
		if c == '.' && i > 0 && name[i-1] == '.' {
			return fmt.Errorf("%w: %s %q contains \"..\"", ErrInvalidName, kind, name)
		}
	}
	return nil
}

// normalizeGroup maps "default" to "", the default namespace (SPEC §1).
func normalizeGroup(group string) string {
	if group == "default" {
		return ""
	}
	return group
}

// queueKey validates topic and group and returns the route key.
func queueKey(topic, group string) (routeKey, error) {
	if err := validateName("topic", topic); err != nil {
		return routeKey{}, err
	}
	group = normalizeGroup(group)
	if group != "" {
		if err := validateName("group", group); err != nil {
			return routeKey{}, err
		}
	}
	return routeKey{topic: topic, group: group}, nil
}

// groupOpt is the wire form of a normalised group: absent for the default.
func groupOpt(group string) wire.Optional[string] {
	if group == "" {
		return wire.Optional[string]{}
	}
	return wire.Some(group)
}
