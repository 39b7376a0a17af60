package fleet

import (
	"encoding/json"
	"strings"
	"testing"

	"ludus.dev/ludus/batch"
)

// TestSpecBuildReadsBatchSpec: the build a batch run plays is read from
// package batch's own Spec JSON; a spec naming none, or unreadable, is an
// error (the caller then refuses to delete anything), not "no build".
func TestSpecBuildReadsBatchSpec(t *testing.T) {
	const build = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	b, err := json.Marshal(batch.Spec{Module: "arena", BuildID: build, Games: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := specBuild(b); err != nil || got != build {
		t.Fatalf("specBuild = %q, %v; want %s", got, err, build)
	}
	for _, bad := range []string{`{"module":"arena"}`, `not json`, ``} {
		if got, err := specBuild([]byte(bad)); err == nil || got != "" {
			t.Errorf("specBuild(%q) = %q, %v; want an error", bad, got, err)
		} else if !strings.Contains(err.Error(), "spec") {
			t.Errorf("specBuild(%q) error %v does not say what is wrong", bad, err)
		}
	}
}
