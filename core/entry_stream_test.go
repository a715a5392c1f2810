package core

import (
	"bytes"
	"testing"

	"pgregory.net/rapid"
)

// TestStreamEntriesRoundTrip: the three stream kinds encode
// deterministically and decode to what was encoded; every truncation of an
// encoding is refused rather than misread.
func TestStreamEntriesRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e := Entry{Epoch: rapid.Uint64().Draw(t, "epoch"), Index: rapid.Uint64().Draw(t, "index")}
		switch rapid.IntRange(0, 2).Draw(t, "kind") {
		case 0:
			e.Kind = EntryStreamDeclare
			e.Stream = &StreamSettings{Tier: uint8(rapid.IntRange(0, 2).Draw(t, "tier")), MaxAgeMs: rapid.Uint64().Draw(t, "age"),
				MaxBytes: rapid.Uint64().Draw(t, "bytes"), MaxRecords: rapid.Uint64().Draw(t, "records"),
				PartitionCount: rapid.Uint32Range(1, 1<<20).Draw(t, "partitions")}
		case 1:
			e.Kind, e.Offset, e.AtMs = EntryStreamRecord, rapid.Uint64().Draw(t, "offset"), rapid.Int64().Draw(t, "atMs")
			e.Body = &Body{Payload: rapid.SliceOf(rapid.Byte()).Draw(t, "payload"), PublishedMs: rapid.Int64().Draw(t, "published"),
				ContentType: ContentType{Kind: ContentJSON}}
			for _, k := range rapid.SliceOfN(rapid.StringMatching(`[a-z]{0,6}`), 0, 3).Draw(t, "headers") {
				e.Body.Headers = append(e.Body.Headers, Header{Key: k, Value: k + "v"})
			}
		case 2:
			e.Kind = EntryCursorCommit
			for i, n := 0, rapid.IntRange(1, 4).Draw(t, "cursors"); i < n; i++ {
				e.Cursors = append(e.Cursors, CursorPos{Name: rapid.StringMatching(`[a-z0-9]{0,8}`).Draw(t, "name"), Next: rapid.Uint64().Draw(t, "next")})
			}
		}
		enc := AppendEntry(nil, &e)
		dec, err := DecodeEntry(enc)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if again := AppendEntry(nil, &dec); !bytes.Equal(again, enc) {
			t.Fatal("entry does not round-trip")
		}
		if dec.Kind != e.Kind || dec.Offset != e.Offset || dec.AtMs != e.AtMs || len(dec.Cursors) != len(e.Cursors) {
			t.Fatalf("decoded %+v from %+v", dec, e)
		}
		if e.Stream != nil && *dec.Stream != *e.Stream {
			t.Fatalf("settings %+v, want %+v", *dec.Stream, *e.Stream)
		}
		for cut := 0; cut < len(enc); cut++ {
			if _, err := DecodeEntry(enc[:cut]); err == nil {
				t.Fatalf("an encoding cut at %d of %d decoded", cut, len(enc))
			}
		}
	})
}

func TestStreamEntriesRefuseBadFields(t *testing.T) {
	bad := AppendEntry(nil, &Entry{Kind: EntryStreamDeclare, Stream: &StreamSettings{Tier: TierDurable, PartitionCount: 1}})
	tier := bytes.Clone(bad)
	tier[19] = 3 // the tier byte, after magic, kind, cause, epoch, index
	if _, err := DecodeEntry(tier); err == nil {
		t.Fatal("tier 3 decoded")
	}
	empty := AppendEntry(nil, &Entry{Kind: EntryCursorCommit, Cursors: []CursorPos{{Name: "a", Next: 1}}})
	empty = append(empty[:19], 0, 0, 0, 0) // a count of zero cursors
	if _, err := DecodeEntry(empty); err == nil {
		t.Fatal("an empty cursor commit decoded")
	}
}
