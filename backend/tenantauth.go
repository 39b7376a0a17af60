package backend

import (
	"context"
	"net/http"
)

// AuthorizeTenant authenticates a tenant's API key for services that other
// packages host beside the backend (matchmaking rules, guest logs): it returns
// the key's tenant id, or the same Connect errors AdminService gives —
// Unauthenticated for a missing or unknown key, PermissionDenied for the
// operator key or a key whose scope is too narrow. write asks for an "admin"
// key; otherwise any scope may read.
func (s *Server) AuthorizeTenant(ctx context.Context, h http.Header, method string, write bool) (string, error) {
	n := needRead
	if write {
		n = needAdmin
	}
	return (&adminService{s}).tenantCall(ctx, h, method, n)
}
