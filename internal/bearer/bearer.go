// Package bearer adds a fixed credential ("Authorization: Bearer <token>") to
// every outgoing Connect call, unary or streaming: the cluster token between
// roles, an API key in `ludus ctl`, a ticket in test clients.
package bearer

import (
	"context"

	"connectrpc.com/connect"
)

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
