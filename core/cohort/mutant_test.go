package cohort

import (
	"flag"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// Each broken variant of the solver or the cohort (assign.go, variant) must
// make the property that checks its rule fail: a check that cannot fail
// proves nothing. The variants are wired into the production code as an
// unexported switch no caller outside the package can set (as package
// mutant does for the rest of Fibril, which this package may not import).

// failure is a rapid.TB that records a failure instead of failing the test,
// so that a mutant's expected failure can be asserted.
type failure struct {
	*testing.T
	failed bool
	first  string
}

func (f *failure) record(msg string) {
	if !f.failed {
		f.first = msg
	}
	f.failed = true
}
func (f *failure) Errorf(format string, args ...any) { f.record(fmt.Sprintf(format, args...)) }
func (f *failure) Error(args ...any)                 { f.record(fmt.Sprint(args...)) }
func (f *failure) Fatalf(format string, args ...any) { f.Errorf(format, args...); f.FailNow() }
func (f *failure) Fatal(args ...any)                 { f.Error(args...); f.FailNow() }
func (f *failure) Fail()                             { f.record("Fail") }
func (f *failure) FailNow()                          { f.record("FailNow"); runtime.Goexit() }
func (f *failure) Failed() bool                      { return f.failed }
func (f *failure) Logf(string, ...any)               {}
func (f *failure) Log(...any)                        {}

// fails runs prop under rapid and reports whether it failed, with rapid's
// first message. It runs on its own goroutine because FailNow ends the
// goroutine it is called on; fail files are off, and shrinking is short,
// as the failure is the expected outcome.
func fails(t *testing.T, prop func(*rapid.T)) (bool, string) {
	for name, value := range map[string]string{"rapid.nofailfile": "true", "rapid.shrinktime": "2s"} {
		old := flag.Lookup(name).Value.String()
		_ = flag.Set(name, value)
		defer func() { _ = flag.Set(name, old) }()
	}
	f := &failure{T: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		rapid.Check(f, prop)
	}()
	<-done
	first, _, _ := strings.Cut(f.first, "\n")
	return f.failed, first
}

func TestMutantsAreCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("mutants run in the full suite")
	}
	for _, c := range []struct {
		name string
		v    variant
		by   string
		prop func(variant) func(*rapid.T)
	}{
		{"no stickiness", variantNoSticky, "TestAssignMatchesBruteForce", propBruteForce},
		{"no stickiness", variantNoSticky, "TestCohortAgainstModel", propCohort},
		{"targets ignored", variantNoTarget, "TestAssignMatchesBruteForce", propBruteForce},
		{"targets ignored", variantNoTarget, "TestAssignAgainstCertificate", propCertificate},
		{"greedy, no chains", variantGreedy, "TestAssignMatchesBruteForce", propBruteForce},
		{"greedy, no chains", variantGreedy, "TestAssignAgainstCertificate", propCertificate},
		{"ties by input order", variantInputOrder, "TestAssignDeterminism", propDeterminism},
		{"generation bumped on no-op", variantBumpOnNoop, "TestCohortAgainstModel", propCohort},
		{"leaver keeps its partitions", variantOverCover, "TestCohortAgainstModel", propCohort},
	} {
		failed, msg := fails(t, c.prop(c.v))
		if !failed {
			t.Errorf("mutant %q was not caught by %s", c.name, c.by)
			continue
		}
		t.Logf("mutant %q caught by %s: %s", c.name, c.by, msg)
	}
}
