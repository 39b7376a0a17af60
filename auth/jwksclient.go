package auth

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// Defaults of a JWKSClient.
const (
	DefaultRefetchInterval = 5 * time.Second
	DefaultFetchTimeout    = 5 * time.Second
	DefaultMaxAge          = 5 * time.Minute
	maxJWKSBytes           = 1 << 20
)

// JWKSClient is a KeySource that fetches the backend's JWK set over HTTP and
// caches it. A kid missing from the cache triggers a refetch, but at most once
// per refetch interval, so tickets with forged kids cannot make it hammer the
// backend. A cache older than the max age is refreshed in the background on
// the next lookup, so keys removed from the set stop being accepted. It is
// safe for concurrent use; cache hits take no lock.
type JWKSClient struct {
	url         string
	client      *http.Client
	interval    time.Duration
	timeout     time.Duration
	maxAge      time.Duration
	now         func() time.Time
	cache       atomic.Pointer[jwksCache]
	sem         chan struct{} // held while fetching; guards lastAttempt and lastErr
	lastAttempt time.Time
	lastErr     error
}

type jwksCache struct {
	keys    StaticKeys
	fetched time.Time
}

// JWKSOption configures a JWKSClient.
type JWKSOption func(*JWKSClient)

// WithHTTPClient sets the HTTP client (default: a new http.Client).
func WithHTTPClient(c *http.Client) JWKSOption { return func(j *JWKSClient) { j.client = c } }

// WithRefetchInterval sets the least time between two fetches caused by
// unknown kids (default DefaultRefetchInterval).
func WithRefetchInterval(d time.Duration) JWKSOption {
	return func(j *JWKSClient) { j.interval = d }
}

// WithFetchTimeout bounds one fetch (default DefaultFetchTimeout).
func WithFetchTimeout(d time.Duration) JWKSOption { return func(j *JWKSClient) { j.timeout = d } }

// WithMaxAge sets the age after which the cached set is refreshed in the
// background (default DefaultMaxAge; 0 or less disables it).
func WithMaxAge(d time.Duration) JWKSOption { return func(j *JWKSClient) { j.maxAge = d } }

// WithClock sets the clock used for rate limiting and cache age (default time.Now).
func WithClock(now func() time.Time) JWKSOption { return func(j *JWKSClient) { j.now = now } }

// NewJWKSClient returns a client for the JWK set at url (for example
// "http://backend:8080/.well-known/jwks.json"). It fetches lazily; call
// Refresh to fetch up front.
func NewJWKSClient(url string, opts ...JWKSOption) *JWKSClient {
	c := &JWKSClient{
		url:      url,
		interval: DefaultRefetchInterval,
		timeout:  DefaultFetchTimeout,
		maxAge:   DefaultMaxAge,
		now:      time.Now,
		sem:      make(chan struct{}, 1),
	}
	for _, o := range opts {
		o(c)
	}
	if c.client == nil {
		c.client = &http.Client{}
	}
	return c
}

// Key implements KeySource.
func (c *JWKSClient) Key(ctx context.Context, kid string) (ed25519.PublicKey, error) {
	if cache := c.cache.Load(); cache != nil {
		if k, ok := cache.keys[kid]; ok {
			if c.maxAge > 0 && c.now().Sub(cache.fetched) >= c.maxAge {
				c.refreshInBackground()
			}
			return k, nil
		}
	}
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", ErrKeysUnavailable, ctx.Err())
	}
	defer func() { <-c.sem }()
	// Another caller may have fetched while this one waited.
	if cache := c.cache.Load(); cache != nil {
		if k, ok := cache.keys[kid]; ok {
			return k, nil
		}
	}
	now := c.now()
	if c.lastAttempt.IsZero() || now.Sub(c.lastAttempt) >= c.interval {
		c.lastAttempt = now
		c.lastErr = c.fetch(ctx)
		if cache := c.cache.Load(); c.lastErr == nil && cache != nil {
			if k, ok := cache.keys[kid]; ok {
				return k, nil
			}
		}
	}
	if c.lastErr != nil {
		// The kid may be a new key the failed fetch would have brought.
		return nil, fmt.Errorf("%w: %w", ErrKeysUnavailable, c.lastErr)
	}
	return nil, fmt.Errorf("%w %s", ErrUnknownKey, quoteID(kid))
}

// Refresh fetches the key set now, regardless of the rate limit.
func (c *JWKSClient) Refresh(ctx context.Context) error {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-c.sem }()
	c.lastAttempt = c.now()
	c.lastErr = c.fetch(ctx)
	return c.lastErr
}

// refreshInBackground refreshes a stale cache unless a fetch is running or one
// was tried within the refetch interval.
func (c *JWKSClient) refreshInBackground() {
	select {
	case c.sem <- struct{}{}:
	default:
		return
	}
	if !c.lastAttempt.IsZero() && c.now().Sub(c.lastAttempt) < c.interval {
		<-c.sem
		return
	}
	c.lastAttempt = c.now()
	go func() {
		defer func() { <-c.sem }()
		c.lastErr = c.fetch(context.Background())
	}()
}

// fetch downloads and installs the key set. The caller holds sem. A fetch
// started for one caller is not cut short when that caller gives up, since
// others wait for its result; the timeout bounds it.
func (c *JWKSClient) fetch(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return fmt.Errorf("jwks: %w", err)
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("jwks: fetch %s: %w", c.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("jwks: fetch %s: %s", c.url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return fmt.Errorf("jwks: fetch %s: %w", c.url, err)
	}
	if len(body) > maxJWKSBytes {
		return errors.New("jwks: key set larger than 1 MiB")
	}
	keys, err := ParseJWKS(body)
	if err != nil {
		return err
	}
	c.cache.Store(&jwksCache{keys: keys, fetched: c.now()})
	return nil
}
