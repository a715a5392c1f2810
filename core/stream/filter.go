package stream

import (
	"strings"

	"github.com/fibril-go/fibril/core"
)

// Filters (PROTOCOL 7.5): an AND of clauses; a clause matches when the
// record has header Key and its value matches Pattern, where '*' matches any
// run (also empty) and nothing else is special. Invariants:
//   - an empty filter matches every record;
//   - a record missing a named header matches no clause naming it;
//   - matching is a pure function of (filter, headers): replay and live agree.

// matches reports whether headers pass every clause.
func matches(filter []Clause, headers []core.Header) bool {
	// Bounded: FilterClausesMax clauses, each scanning the record's headers
	// (HeaderCountMax) and matching one value.
	for i := range filter {
		if !clauseMatches(&filter[i], headers) {
			return false
		}
	}
	return true
}

func clauseMatches(c *Clause, headers []core.Header) bool {
	// The first header with the key decides: headers keep wire order, and a
	// repeated key is the producer's business, not a second chance.
	for i := range headers {
		if headers[i].Key == c.Key {
			return globMatch(c.Pattern, headers[i].Value)
		}
	}
	return false
}

// globMatch matches value against pattern with '*' only, in time linear in
// the value: the literal pieces between stars must appear in order, the
// first as a prefix and the last as a suffix, and for a '*'-only pattern
// the leftmost occurrence of each middle piece is always the best choice
// (taking it leaves the most value for the pieces after). The classic
// backtracking walk it replaces cost len(pattern) x len(value) per record
// (seconds for one long pattern against a 64 KiB header: found by review).
func globMatch(pattern, value string) bool {
	first := strings.IndexByte(pattern, '*')
	if first < 0 {
		return pattern == value // no star: an exact match
	}
	last := strings.LastIndexByte(pattern, '*')
	prefix, suffix := pattern[:first], pattern[last+1:]
	if len(prefix)+len(suffix) > len(value) || !strings.HasPrefix(value, prefix) || !strings.HasSuffix(value, suffix) {
		return false
	}
	// The middle pieces must fit, in order, between prefix and suffix.
	rest := value[len(prefix) : len(value)-len(suffix)]
	middle := ""
	if last > first {
		middle = pattern[first+1 : last]
	}
	for len(middle) > 0 {
		star := strings.IndexByte(middle, '*')
		piece := middle
		if star >= 0 {
			piece, middle = middle[:star], middle[star+1:]
		} else {
			middle = ""
		}
		if piece == "" {
			continue // "**": an empty piece matches anywhere
		}
		at := strings.Index(rest, piece)
		if at < 0 {
			return false
		}
		rest = rest[at+len(piece):]
	}
	return true
}
