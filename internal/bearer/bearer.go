// Package bearer is the "Authorization: Bearer <token>" credential of Ludus
// calls, both sides. Clients: Token adds a fixed credential to every outgoing
// Connect call, unary or streaming (the cluster token or a node credential
// between roles, an API key in `ludus ctl`, a ticket in test clients).
// Servers: FromHeader reads the credential, and Matches and Check compare it
// with a configured secret's SHA-256 in constant time (hashing first hides the
// secret's length too), so every role checks a bearer credential the same way.
package bearer

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"
)

// Errors of Check. Their text is safe to show a caller.
var (
	// ErrMissing: no "Authorization: Bearer <credential>" header, or an
	// empty credential.
	ErrMissing = errors.New("bearer: missing credential")
	// ErrWrong: a credential that matches none of the accepted ones.
	ErrWrong = errors.New("bearer: wrong credential")
)

// FromHeader returns the credential of an "Authorization: Bearer <x>" header
// (the scheme in any case, surrounding spaces trimmed); ok is false if there
// is none or it is empty.
func FromHeader(h http.Header) (credential string, ok bool) {
	scheme, cred, ok := strings.Cut(h.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	cred = strings.TrimSpace(cred)
	return cred, cred != ""
}

// HashOf is the SHA-256 of a secret: what a server keeps of a configured
// credential to compare presented ones with (Matches).
func HashOf(secret string) [32]byte { return sha256.Sum256([]byte(secret)) }

// Matches reports whether token is the secret whose hash is want, comparing
// hashes in constant time. A nil want (no secret configured) matches nothing.
func Matches(token string, want *[32]byte) bool {
	if want == nil {
		return false
	}
	h := HashOf(token)
	return subtle.ConstantTimeCompare(h[:], want[:]) == 1
}

// Check reads the bearer credential of h and returns nil if it matches one of
// want (see Matches), ErrMissing if there is none, ErrWrong otherwise (also
// when want is empty or all nil: nothing configured accepts nothing).
func Check(h http.Header, want ...*[32]byte) error {
	tok, ok := FromHeader(h)
	if !ok {
		return ErrMissing
	}
	for _, w := range want {
		if Matches(tok, w) {
			return nil
		}
	}
	return ErrWrong
}

// Token is a connect.Interceptor sending itself as a bearer credential. An
// empty Token sends no Authorization header.
type Token string

func (t Token) set(h interface{ Set(string, string) }) {
	if t != "" {
		h.Set("Authorization", "Bearer "+string(t))
	}
}

// WrapUnary implements connect.Interceptor.
func (t Token) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		t.set(req.Header())
		return next(ctx, req)
	}
}

// WrapStreamingClient implements connect.Interceptor.
func (t Token) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		t.set(conn.RequestHeader())
		return conn
	}
}

// WrapStreamingHandler implements connect.Interceptor; it does nothing on the
// server side.
func (t Token) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
