package backend

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/internal/utf8cut"
)

// What package batch keeps in the backend: (*Server) implements
// batch.Backend. BatchService (package batch) authorizes callers with
// AuthorizeTenant, BatchWorkerService (batchworker.go) sim nodes' batch
// workers; these methods trust the tenant id they are given.

// Batch defaults.
const (
	// DefaultBatchRetention is how long an ended run's results and archive
	// are kept, unless the tenant's settings say otherwise.
	DefaultBatchRetention = 7 * 24 * time.Hour
	// DefaultBatchCap is a tenant's batch spend cap (CPU time of games, over
	// all its runs), unless its settings say otherwise.
	DefaultBatchCap = 100 * time.Hour
)

var errNoBatchStore = connect.NewError(connect.CodeUnimplemented, errors.New("this backend's store keeps no batch runs"))

func (s *Server) batchStore() (store.BatchStore, error) {
	bs, ok := s.store.(store.BatchStore)
	if !ok {
		return nil, errNoBatchStore
	}
	return bs, nil
}

// BatchModule returns a module build of the tenant: buildID if given, else
// the newest build named name.
func (s *Server) BatchModule(ctx context.Context, tenantID, name, buildID string) (string, []byte, error) {
	if buildID == "" {
		if err := checkModuleName(name); err != nil {
			return "", nil, invalidArg(err)
		}
		m, err := s.store.LatestModule(ctx, tenantID, name)
		if errors.Is(err, store.ErrNotFound) {
			return "", nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("this tenant has no module named %q", name))
		} else if err != nil {
			return "", nil, s.internal(ctx, "batch module", err)
		}
		buildID = m.BuildID
	}
	if err := checkBuildID(buildID); err != nil {
		return "", nil, invalidArg(err)
	}
	m, wasm, err := s.store.GetModule(ctx, tenantID, buildID)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("this tenant has no module build %s", buildID))
	} else if err != nil {
		return "", nil, s.internal(ctx, "batch module", err)
	}
	if name != "" && m.Name != name {
		return "", nil, invalidArg(fmt.Errorf("build %.12s is a build of %q, not %q", buildID, m.Name, name))
	}
	return buildID, wasm, nil
}

// batchSettings returns the tenant's settings with defaults filled in.
func (s *Server) batchSettings(ctx context.Context, tenantID string) (store.BatchSettings, error) {
	bs, err := s.batchStore()
	if err != nil {
		return store.BatchSettings{}, err
	}
	set, err := bs.BatchSettings(ctx, tenantID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return set, err
	}
	if set.Retention <= 0 {
		set.Retention = DefaultBatchRetention
	}
	if set.CapCPUNanos <= 0 {
		set.CapCPUNanos = int64(DefaultBatchCap)
	}
	return set, nil
}

// SetBatchPolicy sets a tenant's batch spend cap and archive retention (zero:
// the defaults), keeping its link key.
func (s *Server) SetBatchPolicy(ctx context.Context, tenantID string, capCPU, retention time.Duration) error {
	bs, err := s.batchStore()
	if err != nil {
		return err
	}
	return bs.PutBatchPolicy(ctx, tenantID, retention, int64(capCPU))
}

// BatchCap returns the tenant's batch spend cap.
func (s *Server) BatchCap(ctx context.Context, tenantID string) (time.Duration, error) {
	set, err := s.batchSettings(ctx, tenantID)
	if err != nil {
		return 0, err
	}
	return time.Duration(set.CapCPUNanos), nil
}

// PutBatchRun records a run; an ended run expires after the tenant's
// retention.
func (s *Server) PutBatchRun(ctx context.Context, r store.BatchRun) error {
	bs, err := s.batchStore()
	if err != nil {
		return err
	}
	if r.State == "ended" {
		set, err := s.batchSettings(ctx, r.TenantID)
		if err != nil {
			return err
		}
		end := r.EndedAt
		if end.IsZero() {
			end = s.now()
		}
		r.ExpiresAt = end.Add(set.Retention)
	}
	return bs.PutBatchRun(ctx, r)
}

// BatchRun returns a run's record.
func (s *Server) BatchRun(ctx context.Context, tenantID, runID string) (store.BatchRun, error) {
	bs, err := s.batchStore()
	if err != nil {
		return store.BatchRun{}, err
	}
	return bs.BatchRun(ctx, tenantID, runID)
}

// PutBatchResult stores a game's result unless the game has one (the first
// result stored wins; stored says whether it was this one). The run must
// exist (NotFound) and be running (FailedPrecondition once its end is
// recorded), and the game must be one of its games (InvalidArgument): what a
// worker may store, in this process or through BatchWorkerService.
func (s *Server) PutBatchResult(ctx context.Context, r store.BatchResult) (bool, error) {
	bs, err := s.batchStore()
	if err != nil {
		return false, err
	}
	run, err := bs.BatchRun(ctx, r.TenantID, r.RunID)
	if errors.Is(err, store.ErrNotFound) {
		return false, connect.NewError(connect.CodeNotFound, fmt.Errorf("this tenant has no batch run %q: the result of its game %d was not stored", clip(r.RunID), r.Game))
	} else if err != nil {
		return false, s.internal(ctx, "batch run", err)
	}
	if run.State != "running" {
		return false, connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("batch run %s has ended (%s): it takes no more results (game %d was not stored)", run.RunID, run.Reason, r.Game))
	}
	if r.Game < 0 || r.Game >= run.Games {
		return false, invalidArg(fmt.Errorf("batch run %s has games 0..%d: there is no game %d", run.RunID, run.Games-1, r.Game))
	}
	stored, err := bs.PutBatchResult(ctx, r, s.batchRunBytes)
	if errors.Is(err, store.ErrRunFull) && len(r.Log) > 0 {
		// Over the run's bound: the game's record without its log, then
		// without its result, so the run still counts every game and says
		// what was not kept. The last form is a few hundred bytes and goes
		// in whatever the count: 100,000 games add at most some 50 MB.
		r.Log = nil
		r.Error = joinNote(r.Error, fmt.Sprintf("log not kept: this run's stored results reached %s", FormatBytes(s.batchRunBytes)))
		stored, err = bs.PutBatchResult(ctx, r, s.batchRunBytes)
	}
	if errors.Is(err, store.ErrRunFull) {
		r.Log, r.Result = nil, nil
		r.Error = joinNote(cutText(r.Error, 1024), fmt.Sprintf("result not kept: this run's stored results reached %s", FormatBytes(s.batchRunBytes)))
		stored, err = bs.PutBatchResult(ctx, r, 0)
	}
	if errors.Is(err, store.ErrNotFound) { // deleted meanwhile (its retention passed)
		return false, connect.NewError(connect.CodeNotFound, fmt.Errorf("batch run %s is gone: the result of its game %d was not stored", run.RunID, r.Game))
	} else if err != nil {
		return false, s.internal(ctx, "store batch result", err)
	}
	return stored, nil
}

// BatchResults returns a page of a run's results (store.BatchStore).
func (s *Server) BatchResults(ctx context.Context, tenantID, runID string, q store.BatchResultQuery) ([]store.BatchResult, bool, error) {
	bs, err := s.batchStore()
	if err != nil {
		return nil, false, err
	}
	return bs.BatchResults(ctx, tenantID, runID, q)
}

// EachBatchResult calls fn with each result q selects, by game, reading them
// a page at a time (q.Limit and q.MaxBytes bound each page; q.FromGame is
// where it starts): memory holds one page whatever the run's size. An error
// of fn stops it and is returned.
func (s *Server) EachBatchResult(ctx context.Context, tenantID, runID string, q store.BatchResultQuery, fn func(store.BatchResult) error) error {
	for {
		page, more, err := s.BatchResults(ctx, tenantID, runID, q)
		if err != nil {
			return err
		}
		for _, r := range page {
			if err := fn(r); err != nil {
				return err
			}
		}
		if !more || len(page) == 0 {
			return nil
		}
		q.FromGame = page[len(page)-1].Game + 1
	}
}

// SweepBatchRuns deletes the runs whose retention has passed, with their
// results: the batch reaper calls it on every sweep.
func (s *Server) SweepBatchRuns(ctx context.Context) (int, error) {
	bs, err := s.batchStore()
	if err != nil {
		return 0, err
	}
	total := 0
	for {
		n, err := bs.DeleteExpiredBatchRuns(ctx, s.now(), 100)
		total += n
		if err != nil || n < 100 {
			return total, err
		}
	}
}

// RotateBatchLinkKey gives the tenant a new archive link key: links signed
// with the old one stop working.
func (s *Server) RotateBatchLinkKey(ctx context.Context, tenantID string) error {
	_, err := s.rotateLinkKey(ctx, tenantID, false)
	return err
}

// rotateLinkKey gives the tenant a new link key and returns the key in
// effect; with ifNone (a first link), a key set meanwhile by another call is
// kept and returned instead, so every first link is signed with the key
// that stays.
func (s *Server) rotateLinkKey(ctx context.Context, tenantID string, ifNone bool) ([]byte, error) {
	bs, err := s.batchStore()
	if err != nil {
		return nil, err
	}
	key := make([]byte, 32)
	rand.Read(key)
	return bs.PutBatchLinkKey(ctx, tenantID, key, ifNone)
}

// joinNote adds note to a result's error text.
func joinNote(text, note string) string {
	if text == "" {
		return note
	}
	return text + "; " + note
}

// cutText cuts s to at most n bytes at a character boundary, marked "…".
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return utf8cut.Cut(s, n) + "…"
}
