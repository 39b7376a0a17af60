package backend

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"ludus.dev/ludus/backend/store"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// What fleet's GameLogService (ops/fleet/gamelogs.go) reads from the backend:
// (*Server) implements fleet.DebugStore. The service authorizes callers with
// AuthorizeTenant; these methods trust the tenant id they are given.

// ArchivedGuestLog returns an archived game's guest log, state and message.
// The log is what the sim node sent with the archive
// (ArchiveGameRequest.guest_log, its newest lines within
// MaxArchivedGuestLogBytes); nil when it sent none.
func (s *Server) ArchivedGuestLog(ctx context.Context, tenantID, gameID string) (*ludusv1.GuestLog, string, string, error) {
	if err := checkGameID(gameID); err != nil {
		return nil, "", "", invalidArg(err)
	}
	a, err := s.store.GameArchive(ctx, tenantID, gameID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, "", "", connect.NewError(connect.CodeNotFound, fmt.Errorf("no game %q, running or archived", gameID))
	} else if err != nil {
		return nil, "", "", s.internal(ctx, "game log", err)
	}
	if len(a.GuestLog) == 0 {
		return nil, a.State, a.Message, nil
	}
	var l ludusv1.GuestLog
	if err := proto.Unmarshal(a.GuestLog, &l); err != nil {
		return nil, "", "", s.internal(ctx, "decode archived guest log", err)
	}
	return &l, a.State, a.Message, nil
}

// TenantBuild returns one of the tenant's module builds: its bytes and name.
func (s *Server) TenantBuild(ctx context.Context, tenantID, buildID string) ([]byte, string, error) {
	if err := checkBuildID(buildID); err != nil {
		return nil, "", invalidArg(err)
	}
	m, wasm, err := s.store.GetModule(ctx, tenantID, buildID)
	if errors.Is(err, store.ErrNotFound) {
		// Archived games outlive their build when it is deleted
		// (DeleteModule): say so, and how to replay one anyway.
		return nil, "", connect.NewError(connect.CodeNotFound, fmt.Errorf(
			"this tenant has no module build %s: it was never uploaded or it has been deleted (DeleteModule); "+
				"to replay an archived game of it, give its module yourself (ludus ctl game replay GAME --wasm FILE)", buildID))
	} else if err != nil {
		return nil, "", s.internal(ctx, "get module", err)
	}
	return wasm, m.Name, nil
}
