package backend

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"ludus.dev/ludus/backend/store"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// API keys and the ticket signing key (AdminService).

func apiKeyProto(k store.APIKey) *ludusv1.APIKey {
	return &ludusv1.APIKey{Id: k.ID, Scope: k.Scope, Name: k.Name, CreatedAt: timestamppb.New(k.CreatedAt)}
}

func checkKeyID(id string) error {
	if id == "" || len(id) > 64 {
		return errors.New("id must be an API key id like k_...")
	}
	return nil
}

// CreateAPIKey creates a key of the caller's tenant.
func (s *adminService) CreateAPIKey(ctx context.Context, req *connect.Request[ludusv1.CreateAPIKeyRequest]) (*connect.Response[ludusv1.CreateAPIKeyResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "CreateAPIKey", needAdmin)
	if err != nil {
		return nil, err
	}
	switch req.Msg.Scope {
	case ScopeAdmin, ScopeServer, ScopeReadOnly:
	default:
		return nil, invalidArg(fmt.Errorf("scope must be %q, %q or %q, got %q", ScopeAdmin, ScopeServer, ScopeReadOnly, clip(req.Msg.Scope)))
	}
	name, err := cleanName("name", req.Msg.Name, MaxKeyNameLen)
	if err != nil {
		return nil, invalidArg(err)
	}
	secret, hash := newAPIKey()
	k := store.APIKey{ID: newID("k_"), TenantID: tenantID, Hash: hash, Scope: req.Msg.Scope, Name: name, CreatedAt: s.now().UTC()}
	if err := s.store.CreateAPIKey(ctx, k); errors.Is(err, store.ErrLimit) {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
			"this tenant holds %d API keys, the most it may: revoke the ones no longer used (ListAPIKeys, RevokeAPIKey) first", store.MaxAPIKeysPerTenant))
	} else if err != nil {
		return nil, s.internal(ctx, "create api key", err)
	}
	return connect.NewResponse(&ludusv1.CreateAPIKeyResponse{Key: apiKeyProto(k), Secret: secret}), nil
}

// ListAPIKeys lists the caller's tenant's keys (never their secrets).
func (s *adminService) ListAPIKeys(ctx context.Context, req *connect.Request[ludusv1.ListAPIKeysRequest]) (*connect.Response[ludusv1.ListAPIKeysResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "ListAPIKeys", needAdmin)
	if err != nil {
		return nil, err
	}
	ks, err := s.store.ListAPIKeys(ctx, tenantID)
	if err != nil {
		return nil, s.internal(ctx, "list api keys", err)
	}
	out := &ludusv1.ListAPIKeysResponse{}
	for _, k := range ks {
		out.Keys = append(out.Keys, apiKeyProto(k))
	}
	return connect.NewResponse(out), nil
}

func (s *adminService) findKey(ctx context.Context, tenantID, id string) (store.APIKey, error) {
	if err := checkKeyID(id); err != nil {
		return store.APIKey{}, invalidArg(err)
	}
	ks, err := s.store.ListAPIKeys(ctx, tenantID)
	if err != nil {
		return store.APIKey{}, s.internal(ctx, "list api keys", err)
	}
	for _, k := range ks {
		if k.ID == id {
			return k, nil
		}
	}
	return store.APIKey{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("no API key %q in this tenant", clip(id)))
}

// RotateAPIKey replaces a key with a fresh one of the same scope and name.
func (s *adminService) RotateAPIKey(ctx context.Context, req *connect.Request[ludusv1.RotateAPIKeyRequest]) (*connect.Response[ludusv1.RotateAPIKeyResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "RotateAPIKey", needAdmin)
	if err != nil {
		return nil, err
	}
	old, err := s.findKey(ctx, tenantID, req.Msg.Id)
	if err != nil {
		return nil, err
	}
	secret, hash := newAPIKey()
	k := store.APIKey{ID: newID("k_"), TenantID: tenantID, Hash: hash, Scope: old.Scope, Name: old.Name, CreatedAt: s.now().UTC()}
	if err := s.store.ReplaceAPIKey(ctx, tenantID, old.ID, k); errors.Is(err, store.ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no API key %q in this tenant", clip(old.ID)))
	} else if err != nil {
		return nil, s.internal(ctx, "rotate api key", err)
	}
	return connect.NewResponse(&ludusv1.RotateAPIKeyResponse{Key: apiKeyProto(k), Secret: secret}), nil
}

// RevokeAPIKey deletes a key.
func (s *adminService) RevokeAPIKey(ctx context.Context, req *connect.Request[ludusv1.RevokeAPIKeyRequest]) (*connect.Response[ludusv1.RevokeAPIKeyResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "RevokeAPIKey", needAdmin)
	if err != nil {
		return nil, err
	}
	if err := checkKeyID(req.Msg.Id); err != nil {
		return nil, invalidArg(err)
	}
	if err := s.store.DeleteAPIKey(ctx, tenantID, req.Msg.Id); errors.Is(err, store.ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no API key %q in this tenant", clip(req.Msg.Id)))
	} else if err != nil {
		return nil, s.internal(ctx, "revoke api key", err)
	}
	return connect.NewResponse(&ludusv1.RevokeAPIKeyResponse{}), nil
}

// RotateSigningKey rotates the ticket signing key. Operator only.
func (s *adminService) RotateSigningKey(ctx context.Context, req *connect.Request[ludusv1.RotateSigningKeyRequest]) (*connect.Response[ludusv1.RotateSigningKeyResponse], error) {
	if err := s.operator(ctx, req.Header(), "RotateSigningKey"); err != nil {
		return nil, err
	}
	kid, err := s.Server.RotateSigningKey(ctx)
	if err != nil {
		return nil, s.internal(ctx, "rotate signing key", err)
	}
	return connect.NewResponse(&ludusv1.RotateSigningKeyResponse{Kid: kid}), nil
}
