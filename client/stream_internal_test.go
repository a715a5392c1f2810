package client

import "testing"

func TestGlobMatch(t *testing.T) {
	cases := []struct {
		glob, name string
		want       bool
	}{
		{"*", "anything", true}, {"*", "", true}, {"events.*", "events.a", true}, {"events.*", "events.", true},
		{"events.*", "event.a", false}, {"a*b*c", "abc", true}, {"a*b*c", "axxbyyc", true}, {"a*b*c", "acb", false},
		{"a*a", "a", false}, {"exact", "exact", true}, {"exact", "exacter", false}, {"*.log", "app.log", true},
		{"*.log", "app.logs", false},
	}
	for _, tc := range cases {
		if got := globMatch(tc.glob, tc.name); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.glob, tc.name, got, tc.want)
		}
	}
}
