package backend

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	"ludus.dev/ludus/auth/clustercred"
	"ludus.dev/ludus/backend/store"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	"ludus.dev/ludus/internal/bearer"
)

// moduleStore implements ludus.cluster.v1.ModuleStoreService.
type moduleStore struct{ *Server }

// Callers of the cluster service. The cluster token (gateways, fleet control,
// and sim nodes not yet given a node credential) may call every method; a
// node credential (package auth/clustercred) only what a sim node needs:
// fetch modules and archive its games (and, on other services, report usage
// and play batch games). A node thus cannot mint match
// credentials or put accounts on a match's roster, i.e. cannot make results
// credit anyone.

// forNodes says whether a method is open to node credentials.
type forNodes bool

const (
	nodesAllowed forNodes = true
	clusterOnly  forNodes = false
)

// cluster authenticates a call of method: the cluster token, or a node
// credential if the method is open to nodes (PermissionDenied otherwise). It
// returns the calling node's id for a node credential, "" for the cluster
// token.
func (s *moduleStore) cluster(h http.Header, method string, nodes forNodes) (node string, err error) {
	if s.clusterHash == nil {
		return "", connect.NewError(connect.CodeUnauthenticated, errors.New("module store disabled: the backend has no cluster token configured"))
	}
	tok, ok := bearer.FromHeader(h)
	if !ok {
		return "", connect.NewError(connect.CodeUnauthenticated,
			errors.New(`missing cluster token or node credential: send "Authorization: Bearer <cluster token or node credential>"`))
	}
	if bearer.Matches(tok, s.clusterHash) {
		return "", nil
	}
	node, ok = clustercred.VerifyNode(s.clusterToken, tok)
	if !ok {
		return "", connect.NewError(connect.CodeUnauthenticated, errors.New("wrong cluster token or node credential"))
	}
	if !nodes {
		return "", connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("%s needs the cluster token (gateway role); the node credential of sim node %q may fetch modules and archive games, not register matches", method, node))
	}
	return node, nil
}

func checkTenantID(id string) error {
	if id == "" || len(id) > 64 {
		return errors.New("tenant_id must be 1..64 characters")
	}
	return nil
}

// ResolveModule returns the newest module of a tenant under a name.
func (s *moduleStore) ResolveModule(ctx context.Context, req *connect.Request[clusterv1.ResolveModuleRequest]) (*connect.Response[clusterv1.ResolveModuleResponse], error) {
	if _, err := s.cluster(req.Header(), "ResolveModule", nodesAllowed); err != nil {
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
	if _, err := s.cluster(req.Header(), "GetModule", nodesAllowed); err != nil {
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
