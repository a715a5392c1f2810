package config

import "strings"

// Suggestions for unknown keys and variables. Invariants:
//   - a suggestion is always a key of the table (or its variable);
//   - a key whose last part spells a flag (lease_ms for --lease-ms) is
//     pointed at that flag's key, the likeliest intent; otherwise the
//     nearest key by edit distance, ties to the first in table order.

// nearestKey returns the known key closest to name.
func nearestKey(name string, table []Key) string {
	parts := strings.Split(name, ".")
	last := parts[len(parts)-1]
	for _, k := range table {
		if k.Flag != "" && strings.ReplaceAll(k.Flag, "-", "_") == last {
			return k.Name
		}
	}
	best, bestDistance := "", -1
	for _, k := range table {
		if d := editDistance(name, k.Name); bestDistance < 0 || d < bestDistance {
			best, bestDistance = k.Name, d
		}
	}
	return best
}

// nearestEnv returns the known variable closest to name and its distance.
func nearestEnv(name string, known map[string]*Key) (string, int) {
	best, bestDistance := "", -1
	for candidate := range known {
		d := editDistance(name, candidate)
		if bestDistance < 0 || d < bestDistance || d == bestDistance && candidate < best {
			best, bestDistance = candidate, d
		}
	}
	return best, bestDistance
}

// editDistance is the Levenshtein distance between a and b (bytes; keys
// are ASCII).
func editDistance(a, b string) int {
	previous := make([]int, len(b)+1)
	current := make([]int, len(b)+1)
	for j := range previous {
		previous[j] = j
	}
	for i := 1; i <= len(a); i++ {
		current[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			current[j] = min(previous[j]+1, current[j-1]+1, previous[j-1]+cost)
		}
		previous, current = current, previous
	}
	return previous[len(b)]
}
