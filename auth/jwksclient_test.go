package auth

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// jwksServer serves a KeySet's JWKS on 127.0.0.1 and counts requests.
type jwksServer struct {
	*httptest.Server
	hits atomic.Int32
}

func newJWKSServer(t *testing.T, ks *KeySet) *jwksServer {
	t.Helper()
	s := &jwksServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Write(ks.PublicJWKS())
	}))
	t.Cleanup(s.Close)
	if !strings.HasPrefix(s.URL, "http://127.0.0.1:") {
		t.Fatalf("test server not on 127.0.0.1: %s", s.URL)
	}
	return s
}

func TestJWKSClientVerifies(t *testing.T) {
	f := newFixture(t)
	srv := newJWKSServer(t, f.keys)
	client := NewJWKSClient(srv.URL+"/.well-known/jwks.json", WithHTTPClient(srv.Client()), WithClock(f.clock.Now))
	v := NewVerifier(client, f.clock.Now)
	ctx := context.Background()

	tok := f.issue(t)
	for range 3 {
		if _, err := v.Verify(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	if n := srv.hits.Load(); n != 1 {
		t.Errorf("fetched %d times for one key, want 1", n)
	}

	// A rotated key is fetched on first sight (the last fetch is old enough).
	f.clock.Add(time.Minute)
	if _, err := f.keys.Rotate(); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(ctx, f.issue(t)); err != nil {
		t.Fatalf("ticket of rotated key: %v", err)
	}
	if n := srv.hits.Load(); n != 2 {
		t.Errorf("fetched %d times after rotation, want 2", n)
	}
	// The old ticket, signed by the retired key, still verifies.
	if _, err := v.Verify(ctx, tok); err != nil {
		t.Errorf("old ticket after rotation: %v", err)
	}
	if n := srv.hits.Load(); n != 2 {
		t.Errorf("fetched %d times, want 2", n)
	}
}

func TestJWKSClientRefetchRateLimit(t *testing.T) {
	f := newFixture(t)
	srv := newJWKSServer(t, f.keys)
	client := NewJWKSClient(srv.URL, WithHTTPClient(srv.Client()), WithClock(f.clock.Now), WithRefetchInterval(5*time.Second))
	v := NewVerifier(client, f.clock.Now)
	ctx := context.Background()
	if err := client.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if n := srv.hits.Load(); n != 1 {
		t.Fatalf("hits after Refresh = %d", n)
	}

	_, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	forged := forge(t, jwt.SigningMethodEdDSA, otherPriv, map[string]any{"kid": "forged-kid", "typ": TicketType}, f.validClaims())

	// Refresh just happened: a storm of forged kids causes no fetch.
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := v.Verify(ctx, forged)
			if !errors.Is(err, ErrInvalidTicket) || !strings.Contains(err.Error(), "unknown signing key") {
				t.Errorf("forged kid: %v", err)
			}
		}()
	}
	wg.Wait()
	if n := srv.hits.Load(); n != 1 {
		t.Fatalf("forged kids caused %d fetches within the interval, want 0", n-1)
	}

	// After the interval, one more fetch, then limited again.
	f.clock.Add(5 * time.Second)
	for range 20 {
		v.Verify(ctx, forged)
	}
	if n := srv.hits.Load(); n != 2 {
		t.Fatalf("hits after interval = %d, want 2", n)
	}
	// Known keys keep verifying without fetches.
	if _, err := v.Verify(ctx, f.issue(t)); err != nil {
		t.Fatal(err)
	}
	if n := srv.hits.Load(); n != 2 {
		t.Fatalf("hits = %d, want 2", n)
	}
}

func TestJWKSClientMaxAge(t *testing.T) {
	f := newFixture(t)
	srv := newJWKSServer(t, f.keys)
	client := NewJWKSClient(srv.URL, WithHTTPClient(srv.Client()), WithClock(f.clock.Now), WithMaxAge(time.Minute))
	ctx := context.Background()
	kid := f.current(t).ID
	if _, err := client.Key(ctx, kid); err != nil {
		t.Fatal(err)
	}
	f.clock.Add(2 * time.Minute)
	if _, err := client.Key(ctx, kid); err != nil { // served from cache, refresh in background
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for srv.hits.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := srv.hits.Load(); n != 2 {
		t.Fatalf("stale cache: hits = %d, want 2", n)
	}
}

func TestJWKSClientFailures(t *testing.T) {
	ctx := context.Background()
	clk := newClock()

	// A server that hangs: the fetch timeout bounds the wait.
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hang.Close()
	defer close(release)
	c := NewJWKSClient(hang.URL, WithHTTPClient(hang.Client()), WithFetchTimeout(100*time.Millisecond), WithClock(clk.Now))
	start := time.Now()
	_, err := NewVerifier(c, clk.Now).Verify(ctx, forgeAny(t, clk))
	if !errors.Is(err, ErrInvalidTicket) || !errors.Is(err, ErrKeysUnavailable) {
		t.Fatalf("hanging server: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("fetch took %v despite timeout", d)
	}

	// Errors and bad documents are unavailability, not unknown keys.
	for name, h := range map[string]http.HandlerFunc{
		"500":      func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", 500) },
		"not jwks": func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"keys":[{"kty":"RSA"}]}`)) },
		"huge":     func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(strings.Repeat(" ", 2<<20))) },
	} {
		srv := httptest.NewServer(h)
		c := NewJWKSClient(srv.URL, WithHTTPClient(srv.Client()), WithClock(clk.Now))
		if _, err := c.Key(ctx, "k"); !errors.Is(err, ErrKeysUnavailable) {
			t.Errorf("%s: err = %v, want ErrKeysUnavailable", name, err)
		}
		if err := c.Refresh(ctx); err == nil {
			t.Errorf("%s: Refresh succeeded", name)
		}
		srv.Close()
	}

	// A canceled context while waiting for a running fetch gives up.
	c2 := NewJWKSClient(hang.URL, WithHTTPClient(hang.Client()), WithFetchTimeout(time.Second), WithClock(clk.Now))
	go c2.Key(ctx, "a") // holds the fetch slot
	time.Sleep(20 * time.Millisecond)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := c2.Key(cctx, "b"); !errors.Is(err, ErrKeysUnavailable) {
		t.Errorf("canceled wait: %v", err)
	}
}

func forgeAny(t *testing.T, clk *fakeClock) string {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	f := &fixture{clock: clk}
	return forge(t, jwt.SigningMethodEdDSA, priv, map[string]any{"kid": "k", "typ": TicketType}, f.validClaims())
}
