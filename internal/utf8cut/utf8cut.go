// Package utf8cut cuts text to a byte bound without splitting a character.
package utf8cut

import "unicode/utf8"

// Cut returns s cut to at most n bytes at a character boundary.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
