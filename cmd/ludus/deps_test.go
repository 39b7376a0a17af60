package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The production binary does not link package testing (nor anything built
// for tests): test helpers stay in _test files and test-only packages.
func TestBinaryDoesNotLinkTesting(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "testing" || strings.HasPrefix(p, "testing/") || strings.HasSuffix(p, "/pgtest") || strings.HasSuffix(p, "/storetest") || strings.HasSuffix(p, "/testenv") {
			t.Errorf("the ludus binary links %s", p)
		}
	}
}
