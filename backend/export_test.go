package backend

import (
	"context"
	"net/netip"
	"time"

	"ludus.dev/ludus/backend/store"
)

// SetPasswordWait makes a Server built from c wait d for a password turn.
func SetPasswordWait(c *Config, d time.Duration) { c.passwordWait = d }

// HoldPasswordTurns takes every password turn of s until release.
func HoldPasswordTurns(s *Server) (release func()) {
	for range cap(s.pwTurns) {
		s.pwTurns <- struct{}{}
	}
	return func() {
		for range cap(s.pwTurns) {
			<-s.pwTurns
		}
	}
}

// SetExportMaxBytes bounds the exports of a Server built from c to n bytes.
func SetExportMaxBytes(c *Config, n int) { c.exportMaxBytes = n }

// SetLookupIP makes a Server built from c resolve webhook hosts with f.
func SetLookupIP(c *Config, f func(ctx context.Context, host string) ([]netip.Addr, error)) {
	c.lookupIP = f
}

// SetModuleBound makes a Server built from c bound each tenant's stored
// builds by b.
func SetModuleBound(c *Config, b store.ModuleBound) { c.moduleBound = b }

// SetKeySyncGap makes a Server built from c read its signing keys again on
// a request at most every d.
func SetKeySyncGap(c *Config, d time.Duration) { c.keySyncGap = d }

// SetUsageReporterClock makes r tell the hour of the usage it is given by now.
func SetUsageReporterClock(r *UsageReporter, now func() time.Time) { r.now = now }
