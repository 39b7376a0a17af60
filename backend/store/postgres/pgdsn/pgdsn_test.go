package pgdsn

import "testing"

func TestWithSearchPath(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u@127.0.0.1:5432/db?sslmode=disable": "postgres://u@127.0.0.1:5432/db?search_path=s1&sslmode=disable",
		"host=127.0.0.1 dbname=db ":                      "host=127.0.0.1 dbname=db search_path=s1",
	} {
		if got := WithSearchPath(in, "s1"); got != want {
			t.Errorf("WithSearchPath(%q) = %q, want %q", in, got, want)
		}
	}
}
