package simnode

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
)

// Inputs is the pipelined input path of a Play stream.
func (s *service) Inputs(ctx context.Context, stream *connect.BidiStream[clusterv1.InputsRequest, clusterv1.InputsResponse]) error {
	return connect.NewError(connect.CodeUnimplemented, errors.New("not yet"))
}
