package auth

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Claims is what a ticket says about its holder.
type Claims struct {
	TenantID    string
	TenantSlug  string
	AccountID   string
	DisplayName string
	// ID is the ticket id (jti).
	ID        string
	IssuedAt  time.Time
	ExpiresAt time.Time
}

// ticketClaims is the JWT claim set of a ticket.
type ticketClaims struct {
	jwt.RegisteredClaims
	TenantID   string `json:"tid"`
	TenantSlug string `json:"tsl,omitempty"`
	Name       string `json:"name,omitempty"`
}

// Issuer signs tickets with the current key of a KeySet.
type Issuer struct {
	keys *KeySet
	now  func() time.Time
}

// NewIssuer returns an Issuer signing with keys; now is the clock (time.Now if nil).
func NewIssuer(keys *KeySet, now func() time.Time) *Issuer {
	if now == nil {
		now = time.Now
	}
	return &Issuer{keys: keys, now: now}
}

// Issue signs a ticket for c, valid for TicketTTL from now. c.TenantID and
// c.AccountID are required; c.ID is generated if empty; c.IssuedAt and
// c.ExpiresAt are ignored. It returns the ticket and its expiry.
func (i *Issuer) Issue(c Claims) (ticket string, expiresAt time.Time, err error) {
	if c.TenantID == "" || c.AccountID == "" {
		return "", time.Time{}, errors.New("auth: ticket needs a tenant id and an account id")
	}
	key, err := i.keys.signer()
	if err != nil {
		return "", time.Time{}, err
	}
	if c.ID == "" {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", time.Time{}, fmt.Errorf("auth: ticket id: %w", err)
		}
		c.ID = b64.EncodeToString(b[:])
	}
	// NumericDate has whole seconds: truncate so expiresAt is exactly exp.
	now := i.now().Truncate(time.Second)
	exp := now.Add(TicketTTL)
	// The ticket is what jwt.Token.SignedString makes of ticketClaims and
	// the header {alg, kid, typ} (TestIssueMatchesTheJWTLibrary), written
	// by hand: encoding/json's reflection and the header's map cost a third
	// of a login's signing time, and every sign-in signs a ticket.
	buf := make([]byte, 0, 512)
	buf = append(buf, `{"alg":"EdDSA","kid":`...)
	buf = appendJSONString(buf, key.ID)
	buf = append(buf, `,"typ":`...)
	buf = appendJSONString(buf, TicketType)
	buf = append(buf, '}')
	header := len(buf)
	buf = append(buf, `{"iss":`...)
	buf = appendJSONString(buf, TicketIssuer)
	buf = append(buf, `,"sub":`...)
	buf = appendJSONString(buf, c.AccountID)
	buf = append(buf, `,"aud":[`...)
	buf = appendJSONString(buf, TicketAudience)
	buf = append(buf, `],"exp":`...)
	buf = strconv.AppendInt(buf, exp.Unix(), 10)
	buf = append(buf, `,"nbf":`...)
	buf = strconv.AppendInt(buf, now.Unix(), 10)
	buf = append(buf, `,"iat":`...)
	buf = strconv.AppendInt(buf, now.Unix(), 10)
	buf = append(buf, `,"jti":`...)
	buf = appendJSONString(buf, c.ID)
	buf = append(buf, `,"tid":`...)
	buf = appendJSONString(buf, c.TenantID)
	if c.TenantSlug != "" {
		buf = append(buf, `,"tsl":`...)
		buf = appendJSONString(buf, c.TenantSlug)
	}
	if c.DisplayName != "" {
		buf = append(buf, `,"name":`...)
		buf = appendJSONString(buf, c.DisplayName)
	}
	buf = append(buf, '}')
	out := make([]byte, 0, b64.EncodedLen(len(buf))+2+b64.EncodedLen(ed25519.SignatureSize)+2)
	out = b64.AppendEncode(out, buf[:header])
	out = append(out, '.')
	out = b64.AppendEncode(out, buf[header:])
	sig, err := jwt.SigningMethodEdDSA.Sign(string(out), key.Private)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("auth: sign ticket: %w", err)
	}
	out = append(out, '.')
	out = b64.AppendEncode(out, sig)
	return string(out), exp, nil
}

// appendJSONString appends s as a JSON string, as encoding/json writes it:
// plain ASCII as is, anything else (quotes, controls, <>&, non-ASCII) by
// encoding/json itself, which escapes and replaces invalid UTF-8 its way.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// ErrInvalidTicket is wrapped by every error of Verifier.Verify.
var ErrInvalidTicket = errors.New("invalid session ticket")

// ErrKeysUnavailable is wrapped (besides ErrInvalidTicket) when verification
// failed because the key set could not be fetched: the ticket may be fine.
var ErrKeysUnavailable = errors.New("signing keys unavailable")

// MaxTicketLen bounds the size of a ticket Verify looks at; real tickets are
// well under 1 KiB.
const MaxTicketLen = 4096

// ticketError is an invalid-ticket error with a precise reason.
type ticketError struct {
	reason string
	cause  error
}

func (e *ticketError) Error() string        { return ErrInvalidTicket.Error() + ": " + e.reason }
func (e *ticketError) Is(target error) bool { return target == ErrInvalidTicket }
func (e *ticketError) Unwrap() error        { return e.cause }

func invalid(cause error, format string, args ...any) error {
	return &ticketError{reason: fmt.Sprintf(format, args...), cause: cause}
}

// Verifier checks tickets against the keys of a KeySource. It is safe for
// concurrent use.
type Verifier struct {
	src    KeySource
	now    func() time.Time
	parser *jwt.Parser
	cache  *verifiedCache // nil: no cache
}

// VerifierOption configures a Verifier.
type VerifierOption func(*Verifier)

// WithCacheSize sets how many verified tickets the Verifier remembers
// (DefaultCacheSize by default); 0 turns the cache off, so every call
// verifies the signature.
func WithCacheSize(n int) VerifierOption {
	return func(v *Verifier) { v.cache = newVerifiedCache(n) }
}

// NewVerifier returns a Verifier using keys from src; now is the clock
// (time.Now if nil). It caches verified tickets (see WithCacheSize).
func NewVerifier(src KeySource, now func() time.Time, opts ...VerifierOption) *Verifier {
	if now == nil {
		now = time.Now
	}
	v := &Verifier{
		src:   src,
		now:   now,
		cache: newVerifiedCache(DefaultCacheSize),
		parser: jwt.NewParser(
			jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}),
			jwt.WithIssuer(TicketIssuer),
			jwt.WithAudience(TicketAudience),
			jwt.WithExpirationRequired(),
			jwt.WithLeeway(Leeway),
			jwt.WithTimeFunc(now),
			jwt.WithStrictDecoding(),
		),
	}
	for _, o := range opts {
		o(v)
	}
	return v
}

// Verify checks a ticket and returns its claims. Every error wraps
// ErrInvalidTicket and names the reason.
//
// A ticket that verified before and has not expired is answered from the
// cache without checking its signature again (same bytes, same SHA-256),
// provided its kid still names the same key.
func (v *Verifier) Verify(ctx context.Context, ticket string) (*Claims, error) {
	if ticket == "" {
		return nil, invalid(nil, "empty ticket")
	}
	if len(ticket) > MaxTicketLen {
		return nil, invalid(nil, "ticket is %d bytes, more than %d", len(ticket), MaxTicketLen)
	}
	var h [32]byte
	if v.cache != nil {
		h = ticketHash(ticket)
		if e := v.cache.get(h, v.now()); e != nil {
			if key, err := v.src.Key(ctx, e.kid); err == nil && key.Equal(e.key) {
				c := e.claims
				return &c, nil
			}
		}
	}
	var tc ticketClaims
	var kid string
	var key ed25519.PublicKey
	tok, err := v.parser.ParseWithClaims(ticket, &tc, func(t *jwt.Token) (any, error) {
		if typ, _ := t.Header["typ"].(string); typ != TicketType {
			return nil, invalid(nil, "typ header is %s, want %q", quoteID(typ), TicketType)
		}
		kid, _ = t.Header["kid"].(string)
		if kid == "" {
			return nil, invalid(nil, "no kid header")
		}
		var err error
		key, err = v.src.Key(ctx, kid)
		if err != nil {
			if errors.Is(err, ErrUnknownKey) {
				return nil, invalid(err, "unknown signing key %s", quoteID(kid))
			}
			return nil, invalid(errors.Join(ErrKeysUnavailable, err), "cannot get signing key %s: %v", quoteID(kid), err)
		}
		return key, nil
	})
	if err != nil {
		return nil, classify(tok, err)
	}
	switch {
	case tc.TenantID == "":
		return nil, invalid(nil, "no tenant (tid)")
	case tc.Subject == "":
		return nil, invalid(nil, "no account (sub)")
	}
	c := &Claims{
		TenantID:    tc.TenantID,
		TenantSlug:  tc.TenantSlug,
		AccountID:   tc.Subject,
		DisplayName: tc.Name,
		ID:          tc.ID,
		ExpiresAt:   tc.ExpiresAt.Time,
	}
	if tc.IssuedAt != nil {
		c.IssuedAt = tc.IssuedAt.Time
	}
	if v.cache != nil {
		e := &cachedTicket{claims: *c, kid: kid, key: key, until: c.ExpiresAt.Add(Leeway)}
		if tc.NotBefore != nil {
			e.from = tc.NotBefore.Add(-Leeway)
		}
		v.cache.put(h, e, v.now())
	}
	return c, nil
}

// classify turns a jwt error into a ticketError with a precise reason.
func classify(tok *jwt.Token, err error) error {
	var te *ticketError
	if errors.As(err, &te) {
		return te // from the key func
	}
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return invalid(err, "malformed: %v", err)
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return invalid(err, "unsupported signing algorithm")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		if tok != nil && tok.Method != nil && tok.Method.Alg() != jwt.SigningMethodEdDSA.Alg() {
			return invalid(err, "signing algorithm %s is not allowed", quoteID(tok.Method.Alg()))
		}
		return invalid(err, "bad signature")
	case errors.Is(err, jwt.ErrTokenExpired):
		return invalid(err, "expired")
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return invalid(err, "not valid yet")
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return invalid(err, "wrong audience")
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return invalid(err, "wrong issuer")
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		msg := err.Error()
		if i := strings.LastIndex(msg, ": "); i >= 0 {
			msg = msg[i+2:] // e.g. "exp claim is required"
		}
		return invalid(err, "missing claim: %s", msg)
	}
	return invalid(err, "%v", err)
}

var (
	_ KeySource = (*KeySet)(nil)
	_ KeySource = StaticKeys(nil)
)
