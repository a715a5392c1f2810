package wire

// Invariants:
//   - ContentKind is a u8 wire enum, append-only: values 0..4 never change meaning.
//   - Custom is meaningful only when Kind is ContentCustom; the encoder writes the
//     string only then, and the decoder leaves it empty otherwise.
//   - Classification (§2.1) maps a MIME string to a kind; MIME maps back. Both are
//     used by the broker (publish normalisation, stream redelivery).

import "strings"

// ContentKind is the content_type kind byte (§2, §2.1). Append-only wire enum.
type ContentKind uint8

const (
	ContentNone    ContentKind = 0
	ContentMsgpack ContentKind = 1
	ContentJSON    ContentKind = 2
	ContentText    ContentKind = 3
	ContentCustom  ContentKind = 4
)

// MIME strings of the fixed kinds (§2.1).
const (
	MIMEMsgpack = "application/msgpack"
	MIMEJSON    = "application/json"
	MIMEText    = "text/plain; charset=utf-8"
)

// ContentTypeHeader is the header whose value becomes the content type when the
// frame carries none; it is compared case-insensitively (§2.1).
const ContentTypeHeader = "content-type"

func (k ContentKind) String() string {
	switch k {
	case ContentNone:
		return "none"
	case ContentMsgpack:
		return "msgpack"
	case ContentJSON:
		return "json"
	case ContentText:
		return "text"
	case ContentCustom:
		return "custom"
	}
	return "unknown"
}

// ContentType is the wire content_type: a kind, plus a MIME string for custom.
type ContentType struct {
	Kind   ContentKind
	Custom string // the MIME string; only for ContentCustom
}

// CustomContentType builds a custom content type carrying mime verbatim.
func CustomContentType(mime string) ContentType {
	return ContentType{Kind: ContentCustom, Custom: mime}
}

// MIME returns the MIME string of c, and false for ContentNone (or an unknown kind).
func (c ContentType) MIME() (string, bool) {
	switch c.Kind {
	case ContentMsgpack:
		return MIMEMsgpack, true
	case ContentJSON:
		return MIMEJSON, true
	case ContentText:
		return MIMEText, true
	case ContentCustom:
		return c.Custom, true
	}
	return "", false
}

// ClassifyContentType maps a MIME string to a content type as Fibril does (§2.1):
// the part before the first ';', trimmed, decides msgpack and json; text needs the
// exact MIMEText value; anything else is custom with the full, untrimmed value.
func ClassifyContentType(mime string) ContentType {
	if mime == MIMEText {
		return ContentType{Kind: ContentText}
	}
	essence, _, _ := strings.Cut(mime, ";")
	switch strings.TrimSpace(essence) {
	case MIMEMsgpack:
		return ContentType{Kind: ContentMsgpack}
	case MIMEJSON:
		return ContentType{Kind: ContentJSON}
	}
	return CustomContentType(mime)
}

// NormalizeContentType applies the broker's publish-time rule (§2.1): every header
// whose key equals "content-type" (ASCII case-insensitively) is removed, and when the
// frame's content type is none the header's value is classified into one. An explicit
// frame content type wins. With several such headers the last in wire order counts,
// matching "last wins" for duplicates. headers is never modified; a new slice is made
// only when a content-type header is present.
func NormalizeContentType(frame ContentType, headers Headers) (ContentType, Headers) {
	last := -1
	for i, kv := range headers {
		if isContentTypeKey(kv.Key) {
			last = i
		}
	}
	if last < 0 {
		return frame, headers
	}
	if frame.Kind == ContentNone {
		frame = ClassifyContentType(headers[last].Value)
	}
	kept := make(Headers, 0, len(headers)-1)
	for _, kv := range headers {
		if !isContentTypeKey(kv.Key) {
			kept = append(kept, kv)
		}
	}
	return frame, kept
}

// isContentTypeKey compares ASCII case-insensitively, as Rust's eq_ignore_ascii_case
// would; strings.EqualFold would also fold non-ASCII letters.
func isContentTypeKey(key string) bool {
	if len(key) != len(ContentTypeHeader) {
		return false
	}
	for i := range len(key) {
		c := key[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != ContentTypeHeader[i] {
			return false
		}
	}
	return true
}

func appendContentType(dst []byte, c ContentType) []byte {
	dst = appendU8(dst, uint8(c.Kind))
	if c.Kind == ContentCustom {
		dst = appendStr(dst, c.Custom)
	}
	return dst
}

func (d *decoder) contentType(field string) ContentType {
	start := d.off
	kind := ContentKind(d.u8(field))
	switch {
	case d.err != nil:
		return ContentType{}
	case kind == ContentCustom:
		return ContentType{Kind: kind, Custom: d.str(field)}
	case kind > ContentCustom:
		d.fail(field, start, ErrUnknownContentType)
		return ContentType{}
	}
	return ContentType{Kind: kind}
}
