// Package pgdsn edits PostgreSQL connection strings. It is separate from
// package postgres so that the tests' helpers (pgtest) and the binary (the
// backend bench) share it without the binary linking package testing.
package pgdsn

import (
	"net/url"
	"strings"
)

// WithSearchPath returns dsn (URL or key=value form) selecting schema: a store
// of its own inside a shared database.
func WithSearchPath(dsn, schema string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return strings.TrimSpace(dsn) + " search_path=" + schema
}
