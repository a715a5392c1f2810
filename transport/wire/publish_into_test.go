package wire

import (
	"errors"
	"reflect"
	"testing"
	"unsafe"
)

// DecodePublishInto must decode exactly as DecodePublish, keep the previous
// topic and group strings only when their bytes repeat, and zero its
// target on error.
func TestDecodePublishIntoReusesNames(t *testing.T) {
	first := Publish{Topic: "orders", Group: Some("eu"), RequireConfirm: true, Payload: []byte("one"),
		Headers: Headers{{Key: "k", Value: "v"}}, TTLMs: Some(uint64(5))}
	var m Publish
	if err := DecodePublishInto(first.AppendTo(nil), &m); err != nil {
		t.Fatal(err)
	}
	want, err := DecodePublish(first.AppendTo(nil))
	if err != nil || !reflect.DeepEqual(m, want) {
		t.Fatalf("DecodePublishInto = %+v, DecodePublish = %+v (%v)", m, want, err)
	}
	topic, group := unsafe.StringData(m.Topic), unsafe.StringData(m.Group.Value)

	second := Publish{Topic: "orders", Group: Some("eu"), Payload: []byte("two")}
	if err := DecodePublishInto(second.AppendTo(nil), &m); err != nil {
		t.Fatal(err)
	}
	if unsafe.StringData(m.Topic) != topic || unsafe.StringData(m.Group.Value) != group {
		t.Fatal("a repeated topic or group was allocated again")
	}
	if string(m.Payload) != "two" || m.Headers != nil || m.TTLMs.Present || m.RequireConfirm {
		t.Fatalf("fields of the previous publish leaked into the next: %+v", m)
	}

	third := Publish{Topic: "invoices", Payload: []byte("three")}
	if err := DecodePublishInto(third.AppendTo(nil), &m); err != nil {
		t.Fatal(err)
	}
	if m.Topic != "invoices" || m.Group.Present {
		t.Fatalf("a new topic decoded as %q, group %+v", m.Topic, m.Group)
	}

	bad := third.AppendTo(nil)
	bad = bad[:len(bad)-3] // cut into the payload
	err = DecodePublishInto(bad, &m)
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("a truncated publish decoded: %v", err)
	}
	if !reflect.DeepEqual(m, Publish{}) {
		t.Fatalf("an error left %+v behind", m)
	}
	_, errPlain := DecodePublish(bad)
	if errPlain == nil || errPlain.Error() != err.Error() {
		t.Fatalf("errors differ: %v vs %v", err, errPlain)
	}
}

// An invalid UTF-8 topic is refused even right after a valid one.
func TestDecodePublishIntoChecksUTF8(t *testing.T) {
	var m Publish
	if err := DecodePublishInto(Publish{Topic: "orders"}.AppendTo(nil), &m); err != nil {
		t.Fatal(err)
	}
	if err := DecodePublishInto(Publish{Topic: "\xff"}.AppendTo(nil), &m); !errors.Is(err, ErrInvalidUTF8) {
		t.Fatalf("an invalid topic decoded: %v", err)
	}
}

// DecodeAckInto decodes as DecodeAck and keeps a repeated topic string.
func TestDecodeAckIntoReusesNames(t *testing.T) {
	var m Ack
	if err := DecodeAckInto(Ack{Topic: "orders", Tags: []uint64{1, 2}}.AppendTo(nil), &m); err != nil {
		t.Fatal(err)
	}
	topic := unsafe.StringData(m.Topic)
	frame := Ack{Topic: "orders", Group: Some("eu"), Partition: 3, Tags: []uint64{7}}.AppendTo(nil)
	if err := DecodeAckInto(frame, &m); err != nil {
		t.Fatal(err)
	}
	want, err := DecodeAck(frame)
	if err != nil || !reflect.DeepEqual(m, want) {
		t.Fatalf("DecodeAckInto = %+v, DecodeAck = %+v (%v)", m, want, err)
	}
	if unsafe.StringData(m.Topic) != topic {
		t.Fatal("a repeated topic was allocated again")
	}
	if err := DecodeAckInto(frame[:len(frame)-1], &m); err == nil || !reflect.DeepEqual(m, Ack{}) {
		t.Fatalf("a truncated ACK decoded or left %+v behind (%v)", m, err)
	}
}
