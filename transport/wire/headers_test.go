package wire

import (
	"reflect"
	"testing"
)

func TestReservedHeaderKeys(t *testing.T) {
	cases := map[string]bool{
		"fibril.retries":            true,
		"fibril.":                   true,
		"stroma.dlq.reason":         true,
		"fibril.client.producer_id": false,
		"fibril.client.":            false,
		"fibril.clientx":            true,
		"fibril":                    false,
		"Fibril.retries":            false, // prefixes are case-sensitive
		"x-fibril.retries":          false,
		"content-type":              false,
		"":                          false,
	}
	for key, want := range cases {
		if got := IsReservedHeaderKey(key); got != want {
			t.Errorf("IsReservedHeaderKey(%q) = %v, want %v", key, got, want)
		}
	}
	h := Headers{{"a", "1"}, {"fibril.client.seq", "2"}, {"stroma.x", "3"}, {"fibril.y", "4"}}
	if key, ok := h.ReservedKey(); !ok || key != "stroma.x" {
		t.Errorf("ReservedKey = %q, %v", key, ok)
	}
	if _, ok := (Headers{{"fibril.client.seq", "2"}}).ReservedKey(); ok {
		t.Errorf("fibril.client. keys are allowed")
	}
}

func TestHeadersMapView(t *testing.T) {
	h := Headers{{"k", "1"}, {"j", "x"}, {"k", "2"}}
	if v, ok := h.Get("k"); !ok || v != "2" {
		t.Errorf("Get(k) = %q, %v; the last duplicate wins", v, ok)
	}
	if _, ok := h.Get("K"); ok {
		t.Errorf("Get is case-sensitive")
	}
	if got, want := h.Deduplicated(), (Headers{{"j", "x"}, {"k", "2"}}); !reflect.DeepEqual(got, want) {
		t.Errorf("Deduplicated = %v, want %v", got, want)
	}
	unique := Headers{{"a", "1"}, {"b", "2"}}
	if got := unique.Deduplicated(); &got[0] != &unique[0] {
		t.Errorf("Deduplicated copied headers without duplicates")
	}
}
