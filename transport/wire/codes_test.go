package wire

import "testing"

func TestErrorCodeRetryable(t *testing.T) {
	cases := map[ErrorCode]bool{
		CodeUnsupportedVersion: false,
		CodeInvalid:            false,
		CodeUnauthorized:       false,
		CodeNotFound:           false,
		CodeConflict:           true,
		CodeTLSRequired:        false,
		CodeInternal:           true,
		503:                    true,
		499:                    false,
	}
	for code, want := range cases {
		if got := code.IsRetryable(); got != want {
			t.Errorf("%v.IsRetryable() = %v, want %v", code, got, want)
		}
	}
}

func TestCodeStrings(t *testing.T) {
	if CodeConflict.String() != "conflict" || ErrorCode(418).String() != "code(418)" {
		t.Errorf("ErrorCode strings")
	}
	if ReasonOwnerMoved.String() != "owner_moved" || ReasonCode(99).String() != "reason(99)" {
		t.Errorf("ReasonCode strings")
	}
}
