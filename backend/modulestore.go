package backend

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend/store"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
)

// moduleStore implements ludus.cluster.v1.ModuleStoreService.
type moduleStore struct{ *Server }

// cluster checks the cluster token of a call.
func (s *moduleStore) cluster(h http.Header) error {
	if s.clusterHash == nil {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("module store disabled: the backend has no cluster token configured"))
	}
	tok, ok := bearer(h)
	if !ok {
		return connect.NewError(connect.CodeUnauthenticated, errors.New(`missing cluster token: send "Authorization: Bearer <token>"`))
	}
	if !secretMatches(tok, s.clusterHash) {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("wrong cluster token"))
	}
	return nil
}

func checkTenantID(id string) error {
	if id == "" || len(id) > 64 {
		return errors.New("tenant_id must be 1..64 characters")
	}
	return nil
}

// ResolveModule returns the newest module of a tenant under a name.
func (s *moduleStore) ResolveModule(ctx context.Context, req *connect.Request[clusterv1.ResolveModuleRequest]) (*connect.Response[clusterv1.ResolveModuleResponse], error) {
	if err := s.cluster(req.Header()); err != nil {
		return nil, err
	}
	if err := checkTenantID(req.Msg.TenantId); err != nil {
		return nil, invalidArg(err)
	}
	if err := checkModuleName(req.Msg.Name); err != nil {
		return nil, invalidArg(err)
	}
	m, err := s.store.LatestModule(ctx, req.Msg.TenantId, req.Msg.Name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound,
			fmt.Errorf("tenant %q has no module named %q: upload one with AdminService.UploadModule", req.Msg.TenantId, req.Msg.Name))
	} else if err != nil {
		return nil, s.internal(ctx, "resolve module", err)
	}
	return connect.NewResponse(&clusterv1.ResolveModuleResponse{Module: moduleProto(m)}), nil
}

// GetModule returns a module's bytes by build id; only the tenant's own builds.
func (s *moduleStore) GetModule(ctx context.Context, req *connect.Request[clusterv1.GetModuleRequest]) (*connect.Response[clusterv1.GetModuleResponse], error) {
	if err := s.cluster(req.Header()); err != nil {
		return nil, err
	}
	if err := checkTenantID(req.Msg.TenantId); err != nil {
		return nil, invalidArg(err)
	}
	if err := checkBuildID(req.Msg.BuildId); err != nil {
		return nil, invalidArg(err)
	}
	m, wasm, err := s.store.GetModule(ctx, req.Msg.TenantId, req.Msg.BuildId)
	if errors.Is(err, store.ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound,
			fmt.Errorf("tenant %q has no module build %s", req.Msg.TenantId, req.Msg.BuildId))
	} else if err != nil {
		return nil, s.internal(ctx, "get module", err)
	}
	return connect.NewResponse(&clusterv1.GetModuleResponse{Module: moduleProto(m), Wasm: wasm}), nil
}
