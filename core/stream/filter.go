package stream

import "github.com/fibril-go/fibril/core"

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

// globMatch matches value against pattern with '*' only. It is the classic
// greedy walk with one backtrack point (the last '*'): O(len(p)*len(v)) at
// worst, no recursion, no allocation.
func globMatch(pattern, value string) bool {
	// p and v walk pattern and value; star is the last '*' seen and mark
	// the value position it is currently taken to swallow up to.
	p, v := 0, 0
	star, mark := -1, 0
	for v < len(value) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, v
			p++
		case p < len(pattern) && pattern[p] == value[v]:
			p++
			v++
		case star >= 0:
			// Let the last '*' swallow one more byte and retry after it.
			mark++
			p, v = star+1, mark
		default:
			return false
		}
	}
	assertTrue(v == len(value), "the walk consumed the whole value")
	// Trailing stars match the empty rest.
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
