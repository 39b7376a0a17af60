package gateway

import (
	"context"
	"errors"

	"buf.build/go/protovalidate"
	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
)

// validator checks every request message against the rules declared in the
// protos (buf.validate annotations): ids, sizes and ranges are part of the API
// contract, so every client learns them from the .proto files and a bad request
// is refused with InvalidArgument before any work is done.
type validator struct{ v protovalidate.Validator }

func newValidator() (*validator, error) {
	v, err := protovalidate.New()
	if err != nil {
		return nil, err
	}
	return &validator{v: v}, nil
}

func (v *validator) check(msg any) error {
	m, ok := msg.(proto.Message)
	if !ok {
		return nil
	}
	if err := v.v.Validate(m); err != nil {
		var verr *protovalidate.ValidationError
		if errors.As(err, &verr) {
			return connect.NewError(connect.CodeInvalidArgument, err)
		}
		return connect.NewError(connect.CodeInternal, err)
	}
	return nil
}

func (v *validator) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := v.check(req.Any()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (v *validator) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (v *validator) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(ctx, &validatingConn{StreamingHandlerConn: conn, v: v})
	}
}

// validatingConn validates every message a stream receives (server streams
// receive one; Play receives many).
type validatingConn struct {
	connect.StreamingHandlerConn
	v *validator
}

func (c *validatingConn) Receive(msg any) error {
	if err := c.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	return c.v.check(msg)
}
