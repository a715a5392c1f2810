package core

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// drawInputs draws a random input sequence (without persistence) for the
// determinism and recovery properties.
func drawInputs(t *rapid.T) []Input {
	n := rapid.IntRange(1, 120).Draw(t, "n")
	now := int64(50_000)
	var ins []Input
	for i := 0; i < n; i++ {
		now += rapid.Int64Range(0, 700).Draw(t, "dt")
		switch rapid.IntRange(0, 8).Draw(t, "kind") {
		case 0, 1:
			in := &Publish{NowMs: now, Confirm: true, Body: &Body{Payload: []byte{byte(i)}, Headers: []Header{{"k", strconv.Itoa(i)}}}}
			if rapid.Bool().Draw(t, "ttl") {
				in.HasTTL, in.TTLMs = true, rapid.Int64Range(0, 2000).Draw(t, "ttlMs")
			}
			if rapid.Bool().Draw(t, "delay") {
				in.NotBeforeMs = now + rapid.Int64Range(0, 2000).Draw(t, "delayMs")
			}
			ins = append(ins, in)
		case 2:
			ins = append(ins, &Subscribe{NowMs: now, SubID: uint64(rapid.IntRange(1, 3).Draw(t, "sub")), Prefetch: 2, AutoAck: rapid.Bool().Draw(t, "auto"),
				Exclusive: rapid.Bool().Draw(t, "exclusive")})
		case 3:
			ins = append(ins, &Ack{NowMs: now, SubID: uint64(rapid.IntRange(1, 3).Draw(t, "sub")), Tags: []uint64{uint64(rapid.IntRange(1, 40).Draw(t, "tag"))}})
		case 4:
			ins = append(ins, &Nack{NowMs: now, SubID: uint64(rapid.IntRange(1, 3).Draw(t, "sub")), Tags: []uint64{uint64(rapid.IntRange(1, 40).Draw(t, "tag"))},
				Requeue: rapid.Bool().Draw(t, "requeue")})
		case 5:
			ins = append(ins, &Unsubscribe{NowMs: now, SubID: uint64(rapid.IntRange(1, 3).Draw(t, "sub"))})
		case 6:
			ins = append(ins, &Declare{NowMs: now, DLQ: &DLQPolicy{Kind: DLQCustom, Target: DLQTarget{Topic: "dlq"}}, MaxRetries: u32(1)})
		case 7:
			ins = append(ins, &Tick{NowMs: now + 1500})
		case 8:
			ins = append(ins, &SetOwner{NowMs: now, SubID: uint64(rapid.IntRange(0, 3).Draw(t, "owner")),
				Generation: uint64(rapid.IntRange(0, 5).Draw(t, "generation"))})
		}
	}
	return ins
}

// run feeds ins to a fresh partition, persisting after every step, and
// returns every output serialised, plus the log.
func run(t *rapid.T, ins []Input) ([]byte, []Entry) {
	p, err := NewPartition(DefaultConfig(QueueID{Topic: "q"}))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	var log []Entry
	record := func(rd *Ready) {
		out.Write(encodeReady(rd))
		log = append(log, rd.Persist...)
	}
	for _, in := range ins {
		record(p.Step(cloneInput(in)))
		record(p.Step(&Persisted{NowMs: in.nowMs(), UpToIndex: p.LastIndex()}))
	}
	return out.Bytes(), log
}

// cloneInput gives each run its own bodies: the core stamps ReceivedMs.
func cloneInput(in Input) Input {
	if pub, ok := in.(*Publish); ok {
		c := *pub
		b := *pub.Body
		c.Body = &b
		return &c
	}
	return in
}

// encodeReady serialises every effect of a Ready, for byte comparisons.
func encodeReady(rd *Ready) []byte {
	var b []byte
	for i := range rd.Persist {
		b = AppendEntry(b, &rd.Persist[i])
	}
	for _, d := range rd.Deliveries {
		b = strconv.AppendQuote(b, strings.Join([]string{"d", strconv.FormatUint(d.SubID, 10), strconv.FormatUint(d.Tag, 10),
			strconv.FormatUint(d.Offset, 10), strconv.FormatUint(uint64(d.Retries), 10)}, ","))
		b = appendBody(b, d.Body)
	}
	for _, r := range rd.Replies {
		msg := ""
		if r.Err != nil {
			msg = r.Err.Error()
		}
		b = strconv.AppendQuote(b, strings.Join([]string{"r", strconv.Itoa(int(r.Kind)), strconv.FormatUint(r.Offset, 10), msg}, ","))
	}
	for _, s := range rd.Settled {
		b = strconv.AppendQuote(b, strings.Join([]string{"s", strconv.FormatUint(s.Offset, 10), strconv.Itoa(int(s.Kind)), s.Reason.String()}, ","))
	}
	for _, dl := range rd.DeadLetters {
		b = strconv.AppendQuote(b, "dl"+dl.Target.Topic)
		b = appendBody(b, dl.Body)
	}
	return strconv.AppendInt(b, rd.NextWakeMs, 10)
}

func TestDeterminism(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ins := drawInputs(t)
		a, _ := run(t, ins)
		b, _ := run(t, ins)
		if !bytes.Equal(a, b) {
			t.Fatal("the same inputs gave different output bytes")
		}
	})
}

// TestRecoveryFromAnyPrefix: a crash may keep any prefix of the log; every
// prefix recovers to a valid state, through a snapshot or not, and the entry
// codec round-trips every entry.
func TestRecoveryFromAnyPrefix(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		_, log := run(t, drawInputs(t))
		cfg := DefaultConfig(QueueID{Topic: "q"})
		for i := range log {
			enc := AppendEntry(nil, &log[i])
			dec, err := DecodeEntry(enc)
			if err != nil || !bytes.Equal(AppendEntry(nil, &dec), enc) {
				t.Fatalf("entry %d does not round-trip: %v", i, err)
			}
		}
		k := rapid.IntRange(0, len(log)).Draw(t, "prefix")
		p, err := Recover(cfg, nil, log[:k])
		if err != nil {
			t.Fatalf("recover prefix %d: %v", k, err)
		}
		if err := p.CheckInvariants(); err != nil {
			t.Fatalf("prefix %d: %v", k, err)
		}
		cut := rapid.IntRange(0, k).Draw(t, "snapshotAt")
		at, _ := Recover(cfg, nil, log[:cut])
		viaSnapshot, err := Recover(cfg, at.Snapshot(), log[cut:k])
		if err != nil {
			t.Fatalf("recover via snapshot at %d: %v", cut, err)
		}
		if !bytes.Equal(viaSnapshot.Snapshot(), p.Snapshot()) {
			t.Fatal("snapshot + suffix differs from full replay")
		}
	})
}

func TestRecoverRejectsBrokenLogs(t *testing.T) {
	h := newHarness(t)
	h.subscribe(1, 1, false)
	h.publish("a")
	h.publish("b")
	log := h.log
	if _, err := Recover(h.cfg, nil, append([]Entry{}, log[1:]...)); err == nil {
		t.Fatal("a log with a gap was accepted")
	}
	bad := append([]Entry{}, log...)
	bad = append(bad, Entry{Epoch: 1, Index: uint64(len(bad) + 1), Kind: EntryAck, Offset: 1}) // offset 1 is ready, not inflight
	if _, err := Recover(h.cfg, nil, bad); err == nil {
		t.Fatal("an inconsistent log was accepted")
	}
	cfg := h.cfg
	cfg.Epoch = 2
	p, err := Recover(cfg, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	p.Step(&Publish{NowMs: h.now, Body: &Body{}})
	backwards := append(append([]Entry{}, log...), Entry{Epoch: 2, Index: uint64(len(log) + 1), Kind: EntryRelease})
	backwards = append(backwards, Entry{Epoch: 1, Index: uint64(len(log) + 2), Kind: EntryRelease})
	if _, err := Recover(cfg, nil, backwards); err == nil {
		t.Fatal("a log whose epoch goes back was accepted")
	}
	if _, err := DecodeEntry([]byte{0xFE, 99}); err == nil {
		t.Fatal("a truncated entry decoded")
	}
	if _, err := Recover(h.cfg, []byte("FSN1junk"), nil); err == nil {
		t.Fatal("a corrupt snapshot was accepted")
	}
}

// TestCoreIsPure enforces DESIGN.md: core/'s own code (and core/node's and core/stream's) does no I/O, reads no
// clock, takes no lock, starts no goroutine and uses no global randomness.
func TestCoreIsPure(t *testing.T) {
	forbidden := map[string]bool{"os": true, "net": true, "net/http": true, "syscall": true, "sync": true, "sync/atomic": true,
		"math/rand": true, "math/rand/v2": true, "crypto/rand": true, "io/ioutil": true, "os/exec": true, "log": true, "log/slog": true,
		"github.com/quic-go/quic-go": true, "github.com/tidwall/wal": true, "time": true, "unsafe": true,
		"io": true, "bufio": true}
	files, _ := filepath.Glob("*.go")
	// core/node holds the node, session and host machines, core/stream the
	// stream partition machine, core/cohort the cohort assignment: pure too.
	for _, pkg := range []string{"node", "stream", "cohort"} {
		pkgFiles, _ := filepath.Glob(filepath.Join(pkg, "*.go"))
		if len(pkgFiles) == 0 {
			t.Fatalf("no files in core/%s: is the test in core/?", pkg)
		}
		files = append(files, pkgFiles...)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if forbidden[path] || strings.HasPrefix(path, "github.com/quic-go/") || strings.HasPrefix(path, "github.com/fibril-go/fibril/io/") {
				t.Errorf("%s imports %s", name, path)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s starts a goroutine", name)
			case *ast.SelectStmt:
				t.Errorf("%s selects on channels", name)
			case *ast.ChanType:
				t.Errorf("%s uses a channel", name)
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok && id.Name == "time" {
					t.Errorf("%s uses time.%s", name, n.Sel.Name)
				}
			}
			return true
		})
	}
	if checked < 5 {
		t.Fatalf("checked only %d files: is the test in core/?", checked)
	}
}
