package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"ludus.dev/ludus/auth"
)

type claimsKey struct{}

// claimsFrom returns the verified claims of the call.
func claimsFrom(ctx context.Context) *auth.Claims {
	c, _ := ctx.Value(claimsKey{}).(*auth.Claims)
	return c
}

// ticketInterceptor verifies the session ticket on every call, unary and
// streaming, before any handler runs. Verification is local (the key set is
// cached), so it costs no backend round trip.
type ticketInterceptor struct{ v Verifier }

func (t *ticketInterceptor) verify(ctx context.Context, h http.Header) (context.Context, error) {
	raw, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	if !ok || raw == "" {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New(`missing session ticket: send "Authorization: Bearer <ticket>" from AuthService.GuestLogin`))
	}
	c, err := t.v.Verify(ctx, raw)
	if err != nil {
		if errors.Is(err, auth.ErrKeysUnavailable) {
			return nil, connect.NewError(connect.CodeUnavailable, err)
		}
		if errors.Is(err, auth.ErrInvalidTicket) {
			return nil, connect.NewError(connect.CodeUnauthenticated, err)
		}
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	return context.WithValue(ctx, claimsKey{}, c), nil
}

func (t *ticketInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		ctx, err := t.verify(ctx, req.Header())
		if err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (t *ticketInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (t *ticketInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, err := t.verify(ctx, conn.RequestHeader())
		if err != nil {
			return err
		}
		return next(ctx, conn)
	}
}
