package auth

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestVerifyCache(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tok := f.issue(t)
	c1, err := f.verifier.Verify(ctx, tok)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := f.verifier.Verify(ctx, tok) // from the cache
	if err != nil {
		t.Fatal(err)
	}
	if *c1 != *c2 || c2.AccountID != testClaims.AccountID {
		t.Fatalf("cached claims %+v, want %+v", c2, c1)
	}
	c2.AccountID = "a_mallory" // callers get copies
	if c3, _ := f.verifier.Verify(ctx, tok); c3.AccountID != testClaims.AccountID {
		t.Fatalf("cache entry changed through a returned pointer: %+v", c3)
	}

	// A tampered copy is a different hash: verified in full and refused.
	parts := strings.Split(tok, ".")
	bad := parts[0] + "." + parts[1] + "." + strings.Repeat("A", len(parts[2]))
	if _, err := f.verifier.Verify(ctx, bad); err == nil {
		t.Fatal("tampered ticket accepted")
	}

	// Withdrawn key: a cached ticket of that key stops verifying.
	other := newFixture(t)
	v := NewVerifier(f.keys, f.clock.Now)
	if _, err := v.Verify(ctx, tok); err != nil {
		t.Fatal(err)
	}
	v.src = other.keys
	if _, err := v.Verify(ctx, tok); err == nil {
		t.Fatal("cached ticket verified after its key left the key source")
	}

	// Clock going back before nbf - leeway: refused like without a cache.
	now := f.clock.Now()
	cur := now
	v = NewVerifier(f.keys, func() time.Time { return cur })
	if _, err := v.Verify(ctx, tok); err != nil {
		t.Fatal(err)
	}
	cur = now.Add(-Leeway - time.Second)
	c, err := v.Verify(ctx, tok)
	wantInvalid(t, c, err, "not valid yet")

	// Expiry is checked on hits (TestExpiry covers the leeway edge).
	f.clock.Add(TicketTTL + Leeway)
	c, err = f.verifier.Verify(ctx, tok)
	wantInvalid(t, c, err, "expired")
}

func TestVerifyCacheBounded(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	v := NewVerifier(f.keys, f.clock.Now, WithCacheSize(16))
	for i := range 100 {
		c := testClaims
		c.AccountID = fmt.Sprintf("a_%d", i)
		tok, _, err := f.issuer.Issue(c)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := v.Verify(ctx, tok); err != nil || got.AccountID != c.AccountID {
			t.Fatalf("Verify: %+v, %v", got, err)
		}
		if n := len(v.cache.m); n > 16 {
			t.Fatalf("cache holds %d entries, bound 16", n)
		}
	}
	if v := NewVerifier(f.keys, f.clock.Now, WithCacheSize(0)); v.cache != nil {
		t.Fatal("WithCacheSize(0) left a cache")
	} else if _, err := v.Verify(ctx, f.issue(t)); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkVerifyUncached(b *testing.B) {
	f := newFixture(b)
	v := NewVerifier(f.keys, f.clock.Now, WithCacheSize(0))
	tok := f.issue(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(ctx, tok); err != nil {
			b.Fatal(err)
		}
	}
}
