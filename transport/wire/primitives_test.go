package wire

import (
	"errors"
	"testing"
)

func TestUUID(t *testing.T) {
	u := UUID{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef}
	if got, want := u.String(), "01234567-89ab-cdef-0123-456789abcdef"; got != want {
		t.Errorf("String = %s, want %s", got, want)
	}
	if u.IsNil() || !(UUID{}).IsNil() {
		t.Errorf("IsNil")
	}
}

func TestOptional(t *testing.T) {
	var absent Optional[uint32]
	if v, ok := absent.Get(); ok || v != 0 || absent.Or(7) != 7 {
		t.Errorf("absent: %v %v", v, ok)
	}
	present := Some(uint32(3))
	if v, ok := present.Get(); !ok || v != 3 || present.Or(7) != 3 {
		t.Errorf("present: %v %v", v, ok)
	}
	if Some("") == (Optional[string]{}) {
		t.Errorf("a present empty string must differ from absent")
	}
}

// TestQueueKeyAgreesAcrossBodies: the broker matches publishes, settlements,
// subscriptions and reconcile entries by one comparable key, whatever the field order.
func TestQueueKeyAgreesAcrossBodies(t *testing.T) {
	key := QueueKey{Topic: "t", Partition: 1, Group: Some("g")}
	keys := []QueueKey{
		Publish{Topic: "t", Partition: 1, Group: Some("g")}.QueueKey(),
		PublishDelayed{Topic: "t", Partition: 1, Group: Some("g")}.QueueKey(),
		Subscribe{Topic: "t", Partition: 1, Group: Some("g")}.QueueKey(),
		Ack{Topic: "t", Partition: 1, Group: Some("g")}.QueueKey(),
		Nack{Topic: "t", Partition: 1, Group: Some("g")}.QueueKey(),
		ReconcileSub{Topic: "t", Partition: 1, Group: Some("g")}.QueueKey(),
	}
	seen := map[QueueKey]int{}
	for _, k := range keys {
		seen[k]++
	}
	if seen[key] != len(keys) {
		t.Errorf("keys differ: %v", keys)
	}
	if (QueueKey{Topic: "t", Partition: 1}) == key {
		t.Errorf("absent group must differ from group g")
	}
}

func TestHeaderDecodeErrorNamesField(t *testing.T) {
	_, err := DecodeHeader(make([]byte, 13))
	if want := "frame header request_id at byte 13: truncated"; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
	var decodeErr *DecodeError
	if !errors.As(err, &decodeErr) || decodeErr.Magic != "" {
		t.Errorf("header errors carry no magic: %#v", decodeErr)
	}
}
