package backend

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"ludus.dev/ludus/backend/store"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/internal/bearer"
	"ludus.dev/ludus/sdk/abi"
)

// API key scopes.
const (
	// ScopeAdmin may do everything on its tenant.
	ScopeAdmin = "admin"
	// ScopeServer is for a studio's game servers and backend: accounts,
	// custom logins, grants, and every read.
	ScopeServer = "server"
	// ScopeReadOnly may only read.
	ScopeReadOnly = "read-only"
)

// need is what a call needs of a tenant key.
type need int

const (
	needRead  need = iota // any scope
	needWrite             // server or admin
	needAdmin             // admin
)

func (n need) allows(scope string) bool {
	switch n {
	case needRead:
		return scope == ScopeAdmin || scope == ScopeServer || scope == ScopeReadOnly
	case needWrite:
		return scope == ScopeAdmin || scope == ScopeServer
	}
	return scope == ScopeAdmin
}

func (n need) String() string {
	return [...]string{`any scope`, `scope "server" or "admin"`, `scope "admin"`}[n]
}

// adminService implements ludus.v1.AdminService.
type adminService struct{ *Server }

// principal is who called, as proved by an API key.
type principal struct {
	operator bool
	tenantID string // tenant keys only
	scope    string
	keyID    string
}

// authenticate checks the API key of a call: Unauthenticated if it is missing
// or unknown.
func (s *adminService) authenticate(ctx context.Context, h http.Header) (principal, error) {
	key, ok := bearer.FromHeader(h)
	if !ok {
		return principal{}, connect.NewError(connect.CodeUnauthenticated,
			errors.New(`missing API key: send "Authorization: Bearer <key>"`))
	}
	if bearer.Matches(key, s.operatorHash) {
		return principal{operator: true}, nil
	}
	unknown := connect.NewError(connect.CodeUnauthenticated, errors.New("unknown API key"))
	if !strings.HasPrefix(key, APIKeyPrefix) || len(key) > 256 {
		return principal{}, unknown
	}
	hash := sha256.Sum256([]byte(key))
	k, err := s.store.APIKeyByHash(ctx, hash[:])
	if errors.Is(err, store.ErrNotFound) {
		return principal{}, unknown
	} else if err != nil {
		return principal{}, s.internal(ctx, "authenticate API key", err)
	}
	return principal{tenantID: k.TenantID, scope: k.Scope, keyID: k.ID}, nil
}

// operator authenticates a call that needs the operator key.
func (s *adminService) operator(ctx context.Context, h http.Header, method string) error {
	p, err := s.authenticate(ctx, h)
	if err != nil {
		return err
	}
	if !p.operator {
		return connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("%s needs the operator key; a tenant's API key cannot manage tenants", method))
	}
	return nil
}

// tenantAdmin authenticates a call that needs a tenant's admin key and returns
// the tenant id.
func (s *adminService) tenantAdmin(ctx context.Context, h http.Header, method string) (string, error) {
	return s.tenantCall(ctx, h, method, needAdmin)
}

// tenantCall authenticates a call on the caller's tenant that needs n, and
// returns the tenant id.
func (s *adminService) tenantCall(ctx context.Context, h http.Header, method string, n need) (string, error) {
	tenantID, _, err := s.tenantScope(ctx, h, method, n)
	return tenantID, err
}

// tenantScope is tenantCall that also returns the key's scope, for calls
// whose answer depends on it.
func (s *adminService) tenantScope(ctx context.Context, h http.Header, method string, n need) (tenantID, scope string, err error) {
	p, err := s.authenticate(ctx, h)
	if err != nil {
		return "", "", err
	}
	if p.operator {
		return "", "", connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("%s acts on one tenant: use that tenant's API key, not the operator key", method))
	}
	if !n.allows(p.scope) {
		return "", "", connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("%s needs a key with %s; this key has scope %q", method, n, p.scope))
	}
	return p.tenantID, p.scope, nil
}

func tenantProto(t store.Tenant) *ludusv1.Tenant {
	return &ludusv1.Tenant{Id: t.ID, Slug: t.Slug, Name: t.Name, CreatedAt: timestamppb.New(t.CreatedAt)}
}

// moduleProto converts a stored module. created_at is the latest upload of the
// build under its name, the moment it became the one in use.
func moduleProto(m store.Module) *ludusv1.Module {
	return &ludusv1.Module{
		BuildId:    m.BuildID,
		Name:       m.Name,
		AbiVersion: int32(m.ABIVersion),
		TickRate:   int32(m.TickRate),
		MaxPlayers: int32(m.MaxPlayers),
		ViewFormat: m.ViewFormat,
		SizeBytes:  m.SizeBytes,
		CreatedAt:  timestamppb.New(m.UploadedAt),
	}
}

// CreateTenant creates a tenant and its first admin key. Operator only.
func (s *adminService) CreateTenant(ctx context.Context, req *connect.Request[ludusv1.CreateTenantRequest]) (*connect.Response[ludusv1.CreateTenantResponse], error) {
	if err := s.operator(ctx, req.Header(), "CreateTenant"); err != nil {
		return nil, err
	}
	if err := checkSlug("slug", req.Msg.Slug); err != nil {
		return nil, invalidArg(err)
	}
	name, err := cleanName("name", req.Msg.Name, MaxTenantNameLen)
	if err != nil {
		return nil, invalidArg(err)
	}
	if name == "" {
		name = req.Msg.Slug
	}
	now := s.now().UTC()
	t := store.Tenant{ID: newID("t_"), Slug: req.Msg.Slug, Name: name, CreatedAt: now}
	key, hash := newAPIKey()
	err = s.store.CreateTenant(ctx, t, store.APIKey{ID: newID("k_"), TenantID: t.ID, Hash: hash, Scope: ScopeAdmin, CreatedAt: now})
	if errors.Is(err, store.ErrAlreadyExists) {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("tenant slug %q is taken", t.Slug))
	} else if err != nil {
		return nil, s.internal(ctx, "create tenant", err)
	}
	s.log.InfoContext(ctx, "backend: tenant created", "tenant", t.ID, "slug", t.Slug)
	return connect.NewResponse(&ludusv1.CreateTenantResponse{Tenant: tenantProto(t), AdminKey: key}), nil
}

// ListTenants lists every tenant. Operator only.
func (s *adminService) ListTenants(ctx context.Context, req *connect.Request[ludusv1.ListTenantsRequest]) (*connect.Response[ludusv1.ListTenantsResponse], error) {
	if err := s.operator(ctx, req.Header(), "ListTenants"); err != nil {
		return nil, err
	}
	ts, err := s.store.ListTenants(ctx)
	if err != nil {
		return nil, s.internal(ctx, "list tenants", err)
	}
	out := &ludusv1.ListTenantsResponse{Tenants: make([]*ludusv1.Tenant, 0, len(ts))}
	for _, t := range ts {
		out.Tenants = append(out.Tenants, tenantProto(t))
	}
	return connect.NewResponse(out), nil
}

// UploadModule validates and stores a module for the caller's tenant.
func (s *adminService) UploadModule(ctx context.Context, req *connect.Request[ludusv1.UploadModuleRequest]) (*connect.Response[ludusv1.UploadModuleResponse], error) {
	tenantID, err := s.tenantAdmin(ctx, req.Header(), "UploadModule")
	if err != nil {
		return nil, err
	}
	m, err := s.putModule(ctx, tenantID, req.Msg.Name, req.Msg.Wasm, false)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&ludusv1.UploadModuleResponse{Module: moduleProto(m)}), nil
}

// putModule validates and stores a module. With ifChanged, a module that is
// already the newest under name is returned without validating or storing it
// again. Errors are Connect errors.
func (s *Server) putModule(ctx context.Context, tenantID, name string, wasm []byte, ifChanged bool) (store.Module, error) {
	if err := checkModuleName(name); err != nil {
		return store.Module{}, invalidArg(err)
	}
	switch {
	case len(wasm) == 0:
		return store.Module{}, invalidArg(errors.New("wasm is empty: send the bytes of a compiled WebAssembly module"))
	case len(wasm) > MaxModuleBytes:
		return store.Module{}, invalidArg(fmt.Errorf("module is %d bytes; the limit is %d (32 MiB)", len(wasm), MaxModuleBytes))
	}
	sum := sha256.Sum256(wasm)
	buildID := hex.EncodeToString(sum[:])
	if ifChanged {
		latest, err := s.store.LatestModule(ctx, tenantID, name)
		if err == nil && latest.BuildID == buildID {
			return latest, nil
		} else if err != nil && !errors.Is(err, store.ErrNotFound) {
			return store.Module{}, s.internal(ctx, "latest module", err)
		}
	}
	meta, err := s.validate(ctx, wasm)
	if err == nil {
		err = meta.Validate()
	}
	if err != nil {
		if ctx.Err() != nil {
			return store.Module{}, s.internal(ctx, "validate module", ctx.Err())
		}
		return store.Module{}, invalidArg(fmt.Errorf("module rejected: %s", clipMessage(err.Error())))
	}
	m, err := s.store.PutModule(ctx, store.Module{
		TenantID:     tenantID,
		Name:         name,
		BuildID:      buildID,
		ABIVersion:   abi.Version,
		MetaName:     meta.Name,
		TickRate:     meta.TickRate,
		MaxPlayers:   meta.MaxPlayers,
		FrameDivisor: meta.FrameDivisor,
		ViewFormat:   meta.ViewFormat,
		ViewWidth:    meta.ViewWidth,
		ViewHeight:   meta.ViewHeight,
		UploadedAt:   s.now().UTC(),
	}, wasm, s.moduleBound)
	if err != nil {
		return store.Module{}, s.moduleErr(ctx, "put module", err)
	}
	s.log.InfoContext(ctx, "backend: module stored", "tenant", tenantID, "name", name, "build", buildID, "bytes", len(wasm))
	return m, nil
}

// clipMessage bounds a validator message shown to a client.
func clipMessage(s string) string {
	const max = 2048
	if len(s) <= max {
		return s
	}
	return s[:max] + "… (truncated)"
}

// ListModules lists the caller's tenant's modules, newest first.
func (s *adminService) ListModules(ctx context.Context, req *connect.Request[ludusv1.ListModulesRequest]) (*connect.Response[ludusv1.ListModulesResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "ListModules", needRead)
	if err != nil {
		return nil, err
	}
	ms, err := s.store.ListModules(ctx, tenantID)
	if err != nil {
		return nil, s.internal(ctx, "list modules", err)
	}
	out := &ludusv1.ListModulesResponse{Modules: make([]*ludusv1.Module, 0, len(ms)),
		MaxBuilds: int32(s.moduleBound.Builds), MaxBytes: s.moduleBound.Bytes}
	for _, m := range ms {
		out.Modules = append(out.Modules, moduleProto(m))
	}
	return connect.NewResponse(out), nil
}

var errNoFleet = connect.NewError(connect.CodeUnavailable, errors.New("fleet view not configured on this backend"))

// ListGames lists the caller's tenant's matches.
func (s *adminService) ListGames(ctx context.Context, req *connect.Request[ludusv1.AdminServiceListGamesRequest]) (*connect.Response[ludusv1.AdminServiceListGamesResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "ListGames", needRead)
	if err != nil {
		return nil, err
	}
	if s.fleet == nil {
		return nil, errNoFleet
	}
	games, err := s.fleet.ListGames(ctx, tenantID)
	if err != nil {
		return nil, s.fleetErr(ctx, "list games", err)
	}
	return connect.NewResponse(&ludusv1.AdminServiceListGamesResponse{Games: games}), nil
}

// ListNodes lists the sim nodes with their internal addresses. Operator
// only: the fleet is the operator's, and a tenant's key (whatever its scope)
// must not learn addresses on the operator's network.
func (s *adminService) ListNodes(ctx context.Context, req *connect.Request[ludusv1.ListNodesRequest]) (*connect.Response[ludusv1.ListNodesResponse], error) {
	p, err := s.authenticate(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	if !p.operator {
		return nil, connect.NewError(connect.CodePermissionDenied,
			errors.New("ListNodes needs the operator key: the sim nodes and their addresses belong to the operator, not to a tenant"))
	}
	if s.fleet == nil {
		return nil, errNoFleet
	}
	nodes, err := s.fleet.ListNodes(ctx)
	if err != nil {
		return nil, s.fleetErr(ctx, "list nodes", err)
	}
	return connect.NewResponse(&ludusv1.ListNodesResponse{Nodes: nodes}), nil
}

func (s *Server) fleetErr(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return s.internal(ctx, op, ctx.Err())
	}
	s.log.ErrorContext(ctx, "backend: "+op, "err", err)
	return connect.NewError(connect.CodeUnavailable, errors.New("fleet state is unavailable right now; try again"))
}
