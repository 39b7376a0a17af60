// Package testenv holds helpers shared by the project's tests.
package testenv

import (
	"os"
	"path/filepath"
)

// WazeroCacheDir is a compilation cache shared by every test process of this
// machine, so the 2-3 MB arena module compiles once rather than once per package
// (under -race, compiling it takes ~20 s). wazero keys entries by its version
// and the module's hash and writes them atomically, so sharing is safe.
func WazeroCacheDir() string {
	if d := os.Getenv("LUDUS_TEST_WAZERO_CACHE"); d != "" {
		return d
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "ludus", "wazero-test-cache")
}
