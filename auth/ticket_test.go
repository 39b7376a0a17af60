package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// fakeClock is a settable clock shared by issuer, key set and verifier.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type fixture struct {
	clock    *fakeClock
	keys     *KeySet
	issuer   *Issuer
	verifier *Verifier
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	clk := newClock()
	ks, err := NewKeySet(clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Rotate(); err != nil {
		t.Fatal(err)
	}
	return &fixture{clock: clk, keys: ks, issuer: NewIssuer(ks, clk.Now), verifier: NewVerifier(ks, clk.Now)}
}

var testClaims = Claims{TenantID: "t_1", TenantSlug: "demo", AccountID: "a_1", DisplayName: "Ada"}

func (f *fixture) issue(t testing.TB) string {
	t.Helper()
	tok, _, err := f.issuer.Issue(testClaims)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (f *fixture) current(t testing.TB) SigningKey {
	t.Helper()
	k, ok := f.keys.Current()
	if !ok {
		t.Fatal("no current key")
	}
	return k
}

// validClaims is the claim set of a good ticket at the fixture's time.
func (f *fixture) validClaims() jwt.MapClaims {
	now := f.clock.Now()
	return jwt.MapClaims{
		"iss": TicketIssuer, "aud": []string{TicketAudience}, "sub": "a_1", "tid": "t_1",
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(TicketTTL).Unix(), "jti": "j",
	}
}

// forge signs claims with method and key, with the given header fields.
func forge(t testing.TB, method jwt.SigningMethod, key any, header map[string]any, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	for k, v := range header {
		if v == nil {
			delete(tok.Header, k)
		} else {
			tok.Header[k] = v
		}
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (f *fixture) goodHeader(t testing.TB) map[string]any {
	return map[string]any{"kid": f.current(t).ID, "typ": TicketType}
}

// wantInvalid checks that err is an invalid-ticket error mentioning reason.
func wantInvalid(t *testing.T, c *Claims, err error, reason string) {
	t.Helper()
	if err == nil {
		t.Fatalf("verified, want error %q; claims %+v", reason, c)
	}
	if !errors.Is(err, ErrInvalidTicket) {
		t.Fatalf("error %q does not wrap ErrInvalidTicket", err)
	}
	if !strings.Contains(err.Error(), reason) {
		t.Fatalf("error %q does not say %q", err, reason)
	}
}

func TestIssueVerifyRoundTrip(t *testing.T) {
	f := newFixture(t)
	tok, exp, err := f.issuer.Issue(testClaims)
	if err != nil {
		t.Fatal(err)
	}
	if want := f.clock.Now().Add(TicketTTL); !exp.Equal(want) {
		t.Errorf("expiresAt = %v, want %v", exp, want)
	}
	c, err := f.verifier.Verify(context.Background(), tok)
	if err != nil {
		t.Fatal(err)
	}
	if c.TenantID != "t_1" || c.TenantSlug != "demo" || c.AccountID != "a_1" || c.DisplayName != "Ada" {
		t.Errorf("claims = %+v", c)
	}
	if c.ID == "" || !c.IssuedAt.Equal(f.clock.Now()) || !c.ExpiresAt.Equal(exp) {
		t.Errorf("id/times = %q %v %v", c.ID, c.IssuedAt, c.ExpiresAt)
	}

	// The header and claims are exactly the documented ones.
	parts := strings.Split(tok, ".")
	var hdr map[string]any
	if err := json.Unmarshal(mustB64(t, parts[0]), &hdr); err != nil {
		t.Fatal(err)
	}
	if hdr["alg"] != "EdDSA" || hdr["typ"] != TicketType || hdr["kid"] != f.current(t).ID || len(hdr) != 3 {
		t.Errorf("header = %v", hdr)
	}
	var cl map[string]any
	if err := json.Unmarshal(mustB64(t, parts[1]), &cl); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"iss", "aud", "sub", "tid", "tsl", "name", "iat", "nbf", "exp", "jti"} {
		if _, ok := cl[k]; !ok {
			t.Errorf("claim %s missing from %v", k, cl)
		}
	}
	if aud, _ := cl["aud"].([]any); len(aud) != 1 || aud[0] != TicketAudience {
		t.Errorf("aud = %v, want [%q]", cl["aud"], TicketAudience)
	}
}

func mustB64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := b64.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestIssueRequiresTenantAndAccount(t *testing.T) {
	f := newFixture(t)
	if _, _, err := f.issuer.Issue(Claims{AccountID: "a"}); err == nil {
		t.Error("issued without tenant")
	}
	if _, _, err := f.issuer.Issue(Claims{TenantID: "t"}); err == nil {
		t.Error("issued without account")
	}
	empty, _ := NewKeySet(f.clock.Now)
	if _, _, err := NewIssuer(empty, f.clock.Now).Issue(testClaims); !errors.Is(err, ErrNoSigningKey) {
		t.Errorf("empty key set: err = %v, want ErrNoSigningKey", err)
	}
}

func TestExpiry(t *testing.T) {
	f := newFixture(t)
	tok := f.issue(t)
	ctx := context.Background()

	f.clock.Add(TicketTTL + Leeway - time.Second) // inside the leeway
	if _, err := f.verifier.Verify(ctx, tok); err != nil {
		t.Fatalf("within leeway: %v", err)
	}
	f.clock.Add(2 * time.Second)
	c, err := f.verifier.Verify(ctx, tok)
	wantInvalid(t, c, err, "expired")
}

func TestNotYetValid(t *testing.T) {
	f := newFixture(t)
	tok := f.issue(t)
	ctx := context.Background()
	early := NewVerifier(f.keys, func() time.Time { return f.clock.Now().Add(-Leeway + time.Second) })
	if _, err := early.Verify(ctx, tok); err != nil {
		t.Fatalf("skew within leeway: %v", err)
	}
	early = NewVerifier(f.keys, func() time.Time { return f.clock.Now().Add(-Leeway - time.Second) })
	c, err := early.Verify(ctx, tok)
	wantInvalid(t, c, err, "not valid yet")
}

func TestRejectsForgedTickets(t *testing.T) {
	f := newFixture(t)
	key := f.current(t)
	_, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	with := func(mod func(jwt.MapClaims)) jwt.MapClaims {
		c := f.validClaims()
		mod(c)
		return c
	}
	good := f.goodHeader(t)
	hdr := func(k string, v any) map[string]any {
		h := map[string]any{"kid": good["kid"], "typ": good["typ"]}
		h[k] = v
		return h
	}

	tests := []struct {
		name   string
		ticket string
		reason string
	}{
		{"control: valid", forge(t, jwt.SigningMethodEdDSA, key.Private, good, f.validClaims()), ""},
		{"wrong aud", forge(t, jwt.SigningMethodEdDSA, key.Private, good, with(func(c jwt.MapClaims) { c["aud"] = []string{"someone-else"} })), "wrong audience"},
		{"aud as string of another", forge(t, jwt.SigningMethodEdDSA, key.Private, good, with(func(c jwt.MapClaims) { c["aud"] = "x" })), "wrong audience"},
		{"no aud", forge(t, jwt.SigningMethodEdDSA, key.Private, good, with(func(c jwt.MapClaims) { delete(c, "aud") })), "aud claim is required"},
		{"wrong iss", forge(t, jwt.SigningMethodEdDSA, key.Private, good, with(func(c jwt.MapClaims) { c["iss"] = "evil" })), "wrong issuer"},
		{"no exp", forge(t, jwt.SigningMethodEdDSA, key.Private, good, with(func(c jwt.MapClaims) { delete(c, "exp") })), "missing claim"},
		{"no tid", forge(t, jwt.SigningMethodEdDSA, key.Private, good, with(func(c jwt.MapClaims) { delete(c, "tid") })), "no tenant"},
		{"no sub", forge(t, jwt.SigningMethodEdDSA, key.Private, good, with(func(c jwt.MapClaims) { c["sub"] = "" })), "no account"},
		{"exp as string", forge(t, jwt.SigningMethodEdDSA, key.Private, good, with(func(c jwt.MapClaims) { c["exp"] = "tomorrow" })), "malformed"},
		{"wrong typ", forge(t, jwt.SigningMethodEdDSA, key.Private, hdr("typ", "JWT"), f.validClaims()), "typ header"},
		{"no typ", forge(t, jwt.SigningMethodEdDSA, key.Private, hdr("typ", nil), f.validClaims()), "typ header"},
		{"missing kid", forge(t, jwt.SigningMethodEdDSA, key.Private, hdr("kid", nil), f.validClaims()), "no kid"},
		{"kid not a string", forge(t, jwt.SigningMethodEdDSA, key.Private, hdr("kid", 7), f.validClaims()), "no kid"},
		{"unknown kid", forge(t, jwt.SigningMethodEdDSA, otherPriv, hdr("kid", "forged"), f.validClaims()), "unknown signing key"},
		{"other key, same kid", forge(t, jwt.SigningMethodEdDSA, otherPriv, good, f.validClaims()), "bad signature"},
		{"alg none", forge(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good, f.validClaims()), `"none" is not allowed`},
		{"HS256 with public key as secret", forge(t, jwt.SigningMethodHS256, []byte(key.Public()), good, f.validClaims()), `"HS256" is not allowed`},
		{"RS256", forge(t, jwt.SigningMethodRS256, rsaKey, good, f.validClaims()), `"RS256" is not allowed`},
		{"ES256", forge(t, jwt.SigningMethodES256, ecKey, good, f.validClaims()), `"ES256" is not allowed`},
		{"unknown alg", rawToken(t, map[string]any{"alg": "XX999", "kid": key.ID, "typ": TicketType}, f.validClaims(), "c2ln"), "unsupported signing algorithm"},
		{"empty", "", "empty ticket"},
		{"garbage", "not a ticket", "malformed"},
		{"two segments", "a.b", "malformed"},
		{"huge", strings.Repeat("a", MaxTicketLen+1), "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := f.verifier.Verify(context.Background(), tt.ticket)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("control ticket rejected: %v", err)
				}
				return
			}
			wantInvalid(t, c, err, tt.reason)
		})
	}
}

// rawToken assembles a token from a header, claims and a base64url signature.
func rawToken(t testing.TB, header map[string]any, claims jwt.MapClaims, sig string) string {
	t.Helper()
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	c, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	return b64.EncodeToString(h) + "." + b64.EncodeToString(c) + "." + sig
}

func TestRejectsTamperedPayload(t *testing.T) {
	f := newFixture(t)
	parts := strings.Split(f.issue(t), ".")
	var cl map[string]any
	if err := json.Unmarshal(mustB64(t, parts[1]), &cl); err != nil {
		t.Fatal(err)
	}
	cl["tid"] = "t_other"
	b, _ := json.Marshal(cl)
	tampered := parts[0] + "." + b64.EncodeToString(b) + "." + parts[2]
	c, err := f.verifier.Verify(context.Background(), tampered)
	wantInvalid(t, c, err, "bad signature")

	// Flipping a signature bit fails too.
	sig := mustB64(t, parts[2])
	sig[0] ^= 1
	c, err = f.verifier.Verify(context.Background(), parts[0]+"."+parts[1]+"."+b64.EncodeToString(sig))
	wantInvalid(t, c, err, "bad signature")
}

func TestRotationOverlap(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	old := f.current(t)
	oldTicket := f.issue(t)

	f.clock.Add(10 * time.Second)
	next, err := f.keys.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	if cur := f.current(t); cur.ID != next.ID || cur.ID == old.ID {
		t.Fatalf("current = %s, want new key %s", cur.ID, next.ID)
	}
	newTicket := f.issue(t)
	if kidOf(t, newTicket) != next.ID {
		t.Error("new ticket not signed by the new key")
	}
	for _, tok := range []string{oldTicket, newTicket} {
		if _, err := f.verifier.Verify(ctx, tok); err != nil {
			t.Fatalf("after rotation: %v", err)
		}
	}
	jwks, err := ParseJWKS(f.keys.PublicJWKS())
	if err != nil {
		t.Fatal(err)
	}
	if len(jwks) != 2 {
		t.Fatalf("JWKS has %d keys during overlap, want 2", len(jwks))
	}
	if pruned := f.keys.Prune(); len(pruned) != 0 {
		t.Fatalf("pruned %v during overlap", pruned)
	}

	// The old ticket verifies to the end of its life (plus leeway)...
	f.clock.Add(TicketTTL + Leeway - 10*time.Second - time.Second)
	if _, err := f.verifier.Verify(ctx, oldTicket); err != nil {
		t.Fatalf("old ticket at end of its life: %v", err)
	}
	// ...and the old key, retired 10 s after it, is published until any
	// ticket it could have signed is dead.
	f.clock.Add(10*time.Second - time.Second)
	if _, err := f.keys.Key(ctx, old.ID); err != nil {
		t.Fatalf("old key gone before its retention ended: %v", err)
	}
	f.clock.Add(2 * time.Second)
	if _, err := f.keys.Key(ctx, old.ID); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("old key still served after retention: %v", err)
	}
	if jwks, _ := ParseJWKS(f.keys.PublicJWKS()); len(jwks) != 1 || jwks[next.ID] == nil {
		t.Errorf("JWKS after retention = %v, want only %s", jwks, next.ID)
	}
	if pruned := f.keys.Prune(); len(pruned) != 1 || pruned[0] != old.ID {
		t.Fatalf("pruned %v, want [%s]", pruned, old.ID)
	}
	if got := f.keys.Keys(); len(got) != 1 || got[0].ID != next.ID {
		t.Fatalf("keys after prune = %v", got)
	}
	if _, err := f.verifier.Verify(ctx, f.issue(t)); err != nil {
		t.Fatalf("new ticket after prune: %v", err)
	}
}

func kidOf(t *testing.T, tok string) string {
	t.Helper()
	var hdr map[string]any
	if err := json.Unmarshal(mustB64(t, strings.Split(tok, ".")[0]), &hdr); err != nil {
		t.Fatal(err)
	}
	s, _ := hdr["kid"].(string)
	return s
}

func TestKeySetPersistence(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.clock.Add(time.Minute)
	if _, err := f.keys.Rotate(); err != nil {
		t.Fatal(err)
	}
	tok := f.issue(t)

	// Persist the way the backend does, and rebuild.
	var stored []SigningKey
	for _, k := range f.keys.Keys() {
		der, err := MarshalPrivate(k.Private)
		if err != nil {
			t.Fatal(err)
		}
		priv, err := ParsePrivate(der)
		if err != nil {
			t.Fatal(err)
		}
		k.Private = priv
		stored = append(stored, k)
	}
	stored[0], stored[1] = stored[1], stored[0] // order must not matter
	again, err := NewKeySet(f.clock.Now, stored...)
	if err != nil {
		t.Fatal(err)
	}
	if cur, _ := again.Current(); cur.ID != f.current(t).ID {
		t.Errorf("current after reload = %s, want %s", cur.ID, f.current(t).ID)
	}
	if _, err := NewVerifier(again, f.clock.Now).Verify(ctx, tok); err != nil {
		t.Fatal(err)
	}

	if _, err := ParsePrivate([]byte("junk")); err == nil {
		t.Error("ParsePrivate accepted junk")
	}
	if _, err := NewKeySet(nil, stored[0], stored[0]); err == nil {
		t.Error("NewKeySet accepted a duplicate id")
	}
	if _, err := NewKeySet(nil, SigningKey{ID: "x", CreatedAt: time.Now()}); err == nil {
		t.Error("NewKeySet accepted a key without private key")
	}
}

func TestKeySetSeveralCurrent(t *testing.T) {
	clk := newClock()
	a, _ := GenerateKey(clk.Now())
	b, _ := GenerateKey(clk.Now().Add(time.Second))
	ks, err := NewKeySet(clk.Now, b, a)
	if err != nil {
		t.Fatal(err)
	}
	cur, _ := ks.Current()
	if cur.ID != b.ID {
		t.Errorf("current = %s, want newest %s", cur.ID, b.ID)
	}
	keys := ks.Keys()
	if len(keys) != 2 || keys[0].ID != a.ID || !keys[0].RetiredAt.Equal(b.CreatedAt) {
		t.Errorf("keys = %+v", keys)
	}

	// Created at the same moment (two replicas starting at once), every
	// set picks the same one, whatever order the store lists them in.
	c, _ := GenerateKey(b.CreatedAt)
	want := max(b.ID, c.ID)
	for _, order := range [][]SigningKey{{b, c}, {c, b}} {
		if err := ks.Replace(order...); err != nil {
			t.Fatal(err)
		}
		if cur, _ := ks.Current(); cur.ID != want {
			t.Errorf("of two keys created together, listed %s then %s: current %s, want %s", order[0].ID, order[1].ID, cur.ID, want)
		}
	}
	// Replace drops what the keys do not hold.
	if _, err := ks.Key(context.Background(), a.ID); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("a key not given to Replace is still published: %v", err)
	}
}

func TestThumbprintRFC8037(t *testing.T) {
	// RFC 8037 Appendix A.3.
	x, _ := b64.DecodeString("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")
	if got, want := Thumbprint(x), "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"; got != want {
		t.Errorf("Thumbprint = %s, want %s", got, want)
	}
}

func TestJWKS(t *testing.T) {
	f := newFixture(t)
	raw := f.keys.PublicJWKS()
	var doc struct {
		Keys []map[string]string `json:"keys"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	k := f.current(t)
	want := map[string]string{"kty": "OKP", "crv": "Ed25519", "kid": k.ID, "x": b64.EncodeToString(k.Public()), "alg": "EdDSA", "use": "sig"}
	if len(doc.Keys) != 1 || len(doc.Keys[0]) != len(want) {
		t.Fatalf("jwks = %s", raw)
	}
	for name, v := range want {
		if doc.Keys[0][name] != v {
			t.Errorf("%s = %q, want %q", name, doc.Keys[0][name], v)
		}
	}
	keys, err := ParseJWKS(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !keys[k.ID].Equal(k.Public()) {
		t.Error("ParseJWKS did not return the key")
	}
	// Verifying with the parsed set works.
	if _, err := NewVerifier(keys, f.clock.Now).Verify(context.Background(), f.issue(t)); err != nil {
		t.Fatal(err)
	}
}

func TestParseJWKSRejects(t *testing.T) {
	x := b64.EncodeToString(make([]byte, 32))
	bad := map[string]string{
		"not json":      `{`,
		"trailing":      `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `"}]} {}`,
		"no keys":       `{"keys":[]}`,
		"RSA":           `{"keys":[{"kty":"RSA","kid":"a","n":"AQAB","e":"AQAB"}]}`,
		"EC":            `{"keys":[{"kty":"EC","crv":"P-256","kid":"a","x":"` + x + `","y":"` + x + `"}]}`,
		"X25519":        `{"keys":[{"kty":"OKP","crv":"X25519","kid":"a","x":"` + x + `"}]}`,
		"oct":           `{"keys":[{"kty":"oct","kid":"a","k":"` + x + `"}]}`,
		"short x":       `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"AAAA"}]}`,
		"long x":        `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + b64.EncodeToString(make([]byte, 33)) + `"}]}`,
		"padded x":      `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `="}]}`,
		"no kid":        `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + x + `"}]}`,
		"dup kid":       `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `"},{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `"}]}`,
		"alg HS256":     `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `","alg":"HS256"}]}`,
		"use enc":       `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `","use":"enc"}]}`,
		"private d":     `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `","d":"` + x + `"}]}`,
		"mixed set":     `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `"},{"kty":"RSA","kid":"b"}]}`,
		"keys not list": `{"keys":{}}`,
	}
	for name, doc := range bad {
		if keys, err := ParseJWKS([]byte(doc)); err == nil {
			t.Errorf("%s: accepted %v", name, keys)
		}
	}
	if _, err := ParseJWKS([]byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `"}]}`)); err != nil {
		t.Errorf("minimal valid set: %v", err)
	}
}

func TestVerifyConcurrent(t *testing.T) {
	f := newFixture(t)
	tok := f.issue(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if _, err := f.verifier.Verify(context.Background(), tok); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	// Rotate while verifying.
	if _, err := f.keys.Rotate(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

func BenchmarkVerify(b *testing.B) {
	f := newFixture(b)
	tok := f.issue(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := f.verifier.Verify(ctx, tok); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkIssue(b *testing.B) {
	f := newFixture(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := f.issuer.Issue(testClaims); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzVerify(f *testing.F) {
	fx := newFixture(f)
	valid := fx.issue(f)
	parts := strings.Split(valid, ".")
	f.Add(valid[:len(valid)-1])
	f.Add(valid + "A")
	f.Add(parts[0] + "." + parts[1] + ".")
	f.Add(parts[0] + ".." + parts[2])
	f.Add("." + parts[1] + "." + parts[2])
	f.Add("")
	f.Add("...")
	f.Add("eyJhbGciOiJub25lIn0.e30.")
	f.Add(strings.Repeat("e", 100))
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, s string) {
		c, err := fx.verifier.Verify(ctx, s)
		if s == valid {
			return
		}
		if err == nil {
			t.Fatalf("verified %q: %+v", s, c)
		}
		if !errors.Is(err, ErrInvalidTicket) {
			t.Fatalf("error %v does not wrap ErrInvalidTicket", err)
		}
	})
}
