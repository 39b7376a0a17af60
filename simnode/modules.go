package simnode

import (
	"context"
	"net/http"

	"connectrpc.com/connect"

	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
)

// ModuleStore fetches modules from the backend's ModuleStoreService.
type ModuleStore struct {
	client clusterv1connect.ModuleStoreServiceClient
}

// NewModuleStore returns a ModuleSource calling the backend at baseURL with the
// cluster token. Modules are up to 32 MiB.
func NewModuleStore(httpClient *http.Client, baseURL, clusterToken string) *ModuleStore {
	return &ModuleStore{client: clusterv1connect.NewModuleStoreServiceClient(httpClient, baseURL,
		connect.WithInterceptors(tokenHeader(clusterToken)), connect.WithReadMaxBytes(33<<20))}
}

// FetchModule implements ModuleSource.
func (s *ModuleStore) FetchModule(ctx context.Context, tenantID, buildID string) ([]byte, error) {
	resp, err := s.client.GetModule(ctx, connect.NewRequest(&clusterv1.GetModuleRequest{TenantId: tenantID, BuildId: buildID}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.Wasm, nil
}

type tokenHeader string

func (t tokenHeader) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(t))
		return next(ctx, req)
	}
}

func (t tokenHeader) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(t))
		return conn
	}
}

func (t tokenHeader) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
