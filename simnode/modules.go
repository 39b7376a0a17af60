package simnode

import (
	"context"
	"ludus.dev/ludus/internal/bearer"
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
		connect.WithInterceptors(bearer.Token(clusterToken)), connect.WithReadMaxBytes(33<<20))}
}

// FetchModule implements ModuleSource.
func (s *ModuleStore) FetchModule(ctx context.Context, tenantID, buildID string) ([]byte, error) {
	resp, err := s.client.GetModule(ctx, connect.NewRequest(&clusterv1.GetModuleRequest{TenantId: tenantID, BuildId: buildID}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.Wasm, nil
}
