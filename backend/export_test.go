package backend

import (
	"context"
	"net/netip"
)

// SetLookupIP makes a Server built from c resolve webhook hosts with f.
func SetLookupIP(c *Config, f func(ctx context.Context, host string) ([]netip.Addr, error)) {
	c.lookupIP = f
}
