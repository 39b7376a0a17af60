package backend

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend/store"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// Deleting module builds. A tenant's stored builds are bounded
// (store.DefaultModuleBound, enforced by the store when one is put); these
// free room. A build may go only if nothing running needs it again: a live
// game's node fetches its build when the game starts and again when another
// node takes the game over after a failure, and a batch run's workers fetch
// the build its spec names for every game. Both are in etcd, which the
// backend reads through its FleetView; without one it cannot tell, and
// refuses. Archived games keep naming their build: replaying one whose
// build was deleted needs the module given locally.

// Domain errors of module storage; moduleErr maps them to Connect codes.
var (
	errUnknownBuild = errors.New("no such module build")
	// errBuildInUse: a live game or a batch run that has not ended uses the
	// build (a *buildInUseError says which).
	errBuildInUse = errors.New("module build in use")
	// errNoFleetCheck: the backend has no FleetView to check a build's use.
	errNoFleetCheck = errors.New("no fleet view to check what uses the build")
	// errFleetUnreadable: reading the fleet's games or batch runs failed.
	errFleetUnreadable = errors.New("fleet state unreadable")
)

// buildInUseError names what uses a build.
type buildInUseError struct {
	buildID string
	users   []string // "live game g_…", "batch run r_… (not ended)"
}

func (e *buildInUseError) Error() string {
	const show = 5
	users := e.users
	more := ""
	if len(users) > show {
		users, more = users[:show], fmt.Sprintf(" and %d more", len(e.users)-show)
	}
	return fmt.Sprintf("build %.12s is in use by %s%s", e.buildID, strings.Join(users, ", "), more)
}

func (e *buildInUseError) Is(target error) bool { return target == errBuildInUse }

// KeptBuild is a build PruneModule left because something uses it.
type KeptBuild struct {
	BuildID string
	Reason  string
}

// buildUsers returns, for each build of the tenant that a live game or a
// batch run that has not ended uses, what uses it.
func (s *Server) buildUsers(ctx context.Context, tenantID string) (map[string][]string, error) {
	if s.fleet == nil {
		return nil, errNoFleetCheck
	}
	games, err := s.fleet.ListGames(ctx, tenantID)
	if err != nil {
		return nil, fmt.Errorf("%w: games: %w", errFleetUnreadable, err)
	}
	runs, err := s.fleet.ActiveBatchBuilds(ctx, tenantID)
	if err != nil {
		return nil, fmt.Errorf("%w: batch runs: %w", errFleetUnreadable, err)
	}
	users := map[string][]string{}
	for _, g := range games {
		// A game that is not finished may still be taken over by another
		// node, which fetches its build again; one with no status yet is
		// starting. A finished game stays in etcd until it is archived, and
		// if its node dies before its final result was delivered, the node
		// that archives it reads the result again by replaying its log on
		// the build: it holds the build until it leaves etcd (seconds).
		what := "live game " + g.GameId
		if g.State == "ended" || g.State == "failed" {
			what = "game " + g.GameId + " (" + g.State + ", not yet archived)"
		}
		users[g.BuildId] = append(users[g.BuildId], what)
	}
	for run, build := range runs {
		users[build] = append(users[build], "batch run "+run+" (not ended)")
	}
	return users, nil
}

// deleteBuild deletes buildID of the tenant (under name only, if set) unless
// something uses it. Even a build that another name keeps is refused while
// in use: checking every time cannot be outrun by a concurrent delete of
// the other copy.
func (s *Server) deleteBuild(ctx context.Context, tenantID, buildID, name string) ([]store.Module, error) {
	users, err := s.buildUsers(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	return s.deleteUnused(ctx, tenantID, buildID, name, users)
}

// deleteUnused is deleteBuild with the tenant's build users read already.
func (s *Server) deleteUnused(ctx context.Context, tenantID, buildID, name string, users map[string][]string) ([]store.Module, error) {
	if u := users[buildID]; len(u) > 0 {
		return nil, &buildInUseError{buildID: buildID, users: u}
	}
	deleted, err := s.store.DeleteModule(ctx, tenantID, buildID, name)
	if errors.Is(err, store.ErrNotFound) {
		if name != "" {
			return nil, fmt.Errorf("%w: %s under name %q", errUnknownBuild, buildID, name)
		}
		return nil, fmt.Errorf("%w: %s", errUnknownBuild, buildID)
	} else if err != nil {
		return nil, err
	}
	for _, m := range deleted {
		s.log.InfoContext(ctx, "backend: module build deleted", "tenant", tenantID, "name", m.Name, "build", m.BuildID, "bytes", m.SizeBytes)
	}
	return deleted, nil
}

// PruneModule deletes every build of name but the newest keep (at least 1),
// leaving those in use (as DeleteModule refuses them). `ludus dev` calls it
// after each upload so that a long session stays within the bound. Errors
// are Connect errors; what was deleted before one is returned with it.
func (s *Server) PruneModule(ctx context.Context, tenantID, name string, keep int) ([]store.Module, []KeptBuild, error) {
	deleted, kept, err := s.pruneModule(ctx, tenantID, name, keep)
	if err != nil {
		return deleted, kept, s.moduleErr(ctx, "prune modules", err)
	}
	return deleted, kept, nil
}

func (s *Server) pruneModule(ctx context.Context, tenantID, name string, keep int) (deleted []store.Module, kept []KeptBuild, err error) {
	if err := checkModuleName(name); err != nil {
		return nil, nil, invalidArg(err)
	}
	keep = max(keep, 1)
	all, err := s.store.ListModules(ctx, tenantID)
	if err != nil {
		return nil, nil, err
	}
	var old []store.Module // newest first, as listed
	n := 0
	for _, m := range all {
		if m.Name != name {
			continue
		}
		if n++; n > keep {
			old = append(old, m)
		}
	}
	if len(old) == 0 {
		return nil, nil, nil
	}
	users, err := s.buildUsers(ctx, tenantID)
	if err != nil {
		return nil, nil, err
	}
	for _, m := range old {
		d, err := s.deleteUnused(ctx, tenantID, m.BuildID, name, users)
		var inUse *buildInUseError
		switch {
		case errors.As(err, &inUse):
			kept = append(kept, KeptBuild{BuildID: m.BuildID, Reason: inUse.Error()})
		case errors.Is(err, errUnknownBuild): // deleted meanwhile
		case err != nil:
			return deleted, kept, err
		}
		deleted = append(deleted, d...)
	}
	return deleted, kept, nil
}

// moduleErr maps the errors of storing and deleting builds to what a caller
// is told: the one place module storage's domain errors become Connect codes.
func (s *Server) moduleErr(ctx context.Context, op string, err error) error {
	var limit *store.ModuleLimitError
	var inUse *buildInUseError
	switch {
	case errors.As(err, &limit):
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
			"this tenant stores %d module builds (%s); the most it may is %d builds and %s in all, and this one would pass that: "+
				"delete builds no longer used (ListModules, then DeleteModule or PruneModules; `ludus ctl modules`, `ludus ctl module delete BUILD`, `ludus ctl module prune NAME --keep N`)",
			limit.Builds, FormatBytes(limit.Bytes), limit.Bound.Builds, FormatBytes(limit.Bound.Bytes)))
	case errors.As(err, &inUse):
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"%v: a node fetches a game's build again when it takes the game over, and a batch run's workers fetch it for every game; "+
				"delete it once they have ended", inUse))
	case errors.Is(err, errNoFleetCheck):
		return connect.NewError(connect.CodeUnavailable, errors.New(
			"this backend has no view of the fleet (etcd), so it cannot check that no live game or batch run uses the build: nothing was deleted"))
	case errors.Is(err, errFleetUnreadable):
		return s.fleetErr(ctx, op, err)
	case errors.Is(err, errUnknownBuild):
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("this tenant has %v", err))
	case errors.Is(err, store.ErrNotFound): // PutModule: the tenant is gone
		return connect.NewError(connect.CodeNotFound, errors.New("unknown tenant"))
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	return s.internal(ctx, op, err)
}

// FormatBytes shows a byte count for people: 2 GiB, 37.5 MiB, 812 B (the
// backend's messages and `ludus ctl`'s listings).
func FormatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/(1<<30)), ".0") + " GiB"
	case n >= 1<<20:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/(1<<20)), ".0") + " MiB"
	case n >= 1<<10:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/(1<<10)), ".0") + " KiB"
	}
	return fmt.Sprintf("%d B", n)
}

// DeleteModule deletes a build of the caller's tenant (under one name, or
// every name), unless a live game or a batch run that has not ended uses it.
func (s *adminService) DeleteModule(ctx context.Context, req *connect.Request[ludusv1.DeleteModuleRequest]) (*connect.Response[ludusv1.DeleteModuleResponse], error) {
	tenantID, err := s.tenantAdmin(ctx, req.Header(), "DeleteModule")
	if err != nil {
		return nil, err
	}
	if err := validateMsg(req.Msg); err != nil {
		return nil, err
	}
	deleted, err := s.deleteBuild(ctx, tenantID, req.Msg.BuildId, req.Msg.Name)
	if err != nil {
		return nil, s.moduleErr(ctx, "delete module", err)
	}
	out := &ludusv1.DeleteModuleResponse{}
	for _, m := range deleted {
		out.Deleted = append(out.Deleted, moduleProto(m))
	}
	return connect.NewResponse(out), nil
}

// PruneModules deletes every build of a name but the newest few, leaving
// those in use.
func (s *adminService) PruneModules(ctx context.Context, req *connect.Request[ludusv1.PruneModulesRequest]) (*connect.Response[ludusv1.PruneModulesResponse], error) {
	tenantID, err := s.tenantAdmin(ctx, req.Header(), "PruneModules")
	if err != nil {
		return nil, err
	}
	if err := validateMsg(req.Msg); err != nil {
		return nil, err
	}
	deleted, kept, err := s.PruneModule(ctx, tenantID, req.Msg.Name, int(req.Msg.Keep))
	if err != nil {
		return nil, err
	}
	out := &ludusv1.PruneModulesResponse{}
	for _, m := range deleted {
		out.Deleted = append(out.Deleted, moduleProto(m))
	}
	for _, k := range kept {
		out.Kept = append(out.Kept, &ludusv1.KeptModule{BuildId: k.BuildID, Reason: k.Reason})
	}
	return connect.NewResponse(out), nil
}
