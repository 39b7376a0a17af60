package auth

import (
	"context"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestIssueMatchesTheJWTLibrary: Issue writes a ticket's JSON by hand; it
// must be byte for byte what jwt.Token.SignedString makes of the same
// claims and header (Ed25519 signatures are deterministic, so the whole
// ticket is), whatever a display name holds, and verify as that name.
func TestIssueMatchesTheJWTLibrary(t *testing.T) {
	f := newFixture(t)
	key, err := f.keys.signer()
	if err != nil {
		t.Fatal(err)
	}
	names := []string{
		"", "plain", "Zoë", "名前", `quo"te`, `back\slash`, "tab\there", "nl\n", "bell\x07", "del\x7f",
		"<script>&amp;</script>", "line\u2028sep\u2029", "bad utf-8 \xff\xfe", "\xc3", "emoji 🎮",
	}
	for _, name := range names {
		for _, slug := range []string{"", "demo", "with space<>"} {
			c := Claims{TenantID: "t_1", TenantSlug: slug, AccountID: "a_" + slug, DisplayName: name, ID: "jti-1"}
			got, exp, err := f.issuer.Issue(c)
			if err != nil {
				t.Fatal(err)
			}
			now := f.clock.Now().Truncate(time.Second)
			tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, ticketClaims{
				RegisteredClaims: jwt.RegisteredClaims{
					Issuer: TicketIssuer, Subject: c.AccountID, Audience: jwt.ClaimStrings{TicketAudience},
					ExpiresAt: jwt.NewNumericDate(now.Add(TicketTTL)), NotBefore: jwt.NewNumericDate(now),
					IssuedAt: jwt.NewNumericDate(now), ID: c.ID,
				},
				TenantID: c.TenantID, TenantSlug: c.TenantSlug, Name: c.DisplayName,
			})
			tok.Header["kid"] = key.ID
			tok.Header["typ"] = TicketType
			want, err := tok.SignedString(key.Private)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("name %q slug %q: Issue wrote\n%s\nthe jwt library\n%s", name, slug, got, want)
			}
			if !exp.Equal(now.Add(TicketTTL)) {
				t.Fatalf("expiry %v, want %v", exp, now.Add(TicketTTL))
			}
			v, err := f.verifier.Verify(context.Background(), got)
			if err != nil {
				t.Fatalf("name %q: %v", name, err)
			}
			if v.AccountID != c.AccountID || v.TenantSlug != slug || v.ID != c.ID {
				t.Fatalf("verified %+v from %+v", v, c)
			}
		}
	}
	// A clock with a fraction of a second: the ticket's times are whole seconds.
	f.clock.Add(1500 * time.Millisecond)
	got, exp, err := f.issuer.Issue(Claims{TenantID: "t_1", AccountID: "a_1", ID: "j"})
	if err != nil {
		t.Fatal(err)
	}
	v, err := f.verifier.Verify(context.Background(), got)
	if err != nil {
		t.Fatal(err)
	}
	if !v.ExpiresAt.Equal(exp) || exp.Nanosecond() != 0 {
		t.Fatalf("expiry %v, verified %v", exp, v.ExpiresAt)
	}
}
