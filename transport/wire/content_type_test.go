package wire

import (
	"reflect"
	"testing"
)

func TestClassifyContentType(t *testing.T) {
	cases := []struct {
		mime string
		want ContentType
	}{
		{"application/msgpack", ContentType{Kind: ContentMsgpack}},
		{"application/json", ContentType{Kind: ContentJSON}},
		{"application/json; charset=utf-8", ContentType{Kind: ContentJSON}},
		{"  application/json ;x", ContentType{Kind: ContentJSON}},
		{"application/msgpack;v=2", ContentType{Kind: ContentMsgpack}},
		{"text/plain; charset=utf-8", ContentType{Kind: ContentText}},
		// text needs the exact value; anything else is custom with the full string.
		{"text/plain", CustomContentType("text/plain")},
		{"text/plain;charset=utf-8", CustomContentType("text/plain;charset=utf-8")},
		{"Application/JSON", CustomContentType("Application/JSON")},
		{"application/x-thing", CustomContentType("application/x-thing")},
		{"", CustomContentType("")},
	}
	for _, c := range cases {
		if got := ClassifyContentType(c.mime); got != c.want {
			t.Errorf("ClassifyContentType(%q) = %+v, want %+v", c.mime, got, c.want)
		}
	}
}

func TestContentTypeMIME(t *testing.T) {
	for _, c := range []ContentType{{Kind: ContentMsgpack}, {Kind: ContentJSON}, {Kind: ContentText},
		CustomContentType("application/x-thing")} {
		mime, ok := c.MIME()
		if !ok || ClassifyContentType(mime) != c {
			t.Errorf("%+v: MIME %q, %v does not classify back", c, mime, ok)
		}
	}
	if _, ok := (ContentType{}).MIME(); ok {
		t.Errorf("none has a MIME string")
	}
}

func TestNormalizeContentType(t *testing.T) {
	headers := Headers{{"a", "1"}, {"Content-Type", "application/json"}, {"b", "2"}, {"CONTENT-TYPE", "text/csv"}}
	original := append(Headers(nil), headers...)

	ct, kept := NormalizeContentType(ContentType{}, headers)
	if want := CustomContentType("text/csv"); ct != want {
		t.Errorf("frame none: content type %+v, want %+v (last header wins)", ct, want)
	}
	if want := (Headers{{"a", "1"}, {"b", "2"}}); !reflect.DeepEqual(kept, want) {
		t.Errorf("headers %v, want %v", kept, want)
	}
	if !reflect.DeepEqual(headers, original) {
		t.Errorf("input headers modified: %v", headers)
	}

	ct, kept = NormalizeContentType(ContentType{Kind: ContentMsgpack}, headers)
	if ct.Kind != ContentMsgpack || len(kept) != 2 {
		t.Errorf("explicit frame content type must win and the header still go: %+v %v", ct, kept)
	}

	plain := Headers{{"content-typex", "application/json"}, {"x", "y"}}
	ct, kept = NormalizeContentType(ContentType{}, plain)
	if ct.Kind != ContentNone || &kept[0] != &plain[0] {
		t.Errorf("without a content-type header nothing changes: %+v %v", ct, kept)
	}
	// Only ASCII letters fold: a Kelvin sign is not a 'k' here (there is no k anyway).
	if isContentTypeKey("content\u2010type") {
		t.Errorf("non-ASCII key matched")
	}
}

func TestContentKindString(t *testing.T) {
	if ContentJSON.String() != "json" || ContentKind(9).String() != "unknown" {
		t.Errorf("ContentKind strings")
	}
}
