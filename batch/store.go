package batch

import (
	"context"
	"encoding/json"
	"time"

	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/clusterstate"
)

// WorkerBackend is what a worker's game-playing slots need of the backend:
// module builds and durable results. A worker outside the backend's process
// (a sim node, which holds neither the cluster token nor database access)
// reaches it through BatchWorkerService with its own credential
// (RemoteBackend); one inside it uses the Server itself. Errors are Connect
// errors where the backend makes them (NotFound for an unknown module or run,
// FailedPrecondition for a result of an ended run).
type WorkerBackend interface {
	// BatchModule resolves a tenant's module: the build buildID if given
	// (it must be one of the tenant's), else the newest build named name. It
	// returns the build id and the module's bytes.
	BatchModule(ctx context.Context, tenantID, name, buildID string) (string, []byte, error)
	// PutBatchResult stores a game's result unless the game has one; stored
	// reports whether this one was kept. The run must exist and be running,
	// and the game must be one of its games.
	PutBatchResult(ctx context.Context, r store.BatchResult) (stored bool, err error)
}

// Backend is what batch runs need of the backend: a WorkerBackend plus run
// records, the tenants' settings and archive links, which admission, the
// Service and the reaper use (they run in the backend's process).
// (*backend.Server) implements it (backend/batch.go).
type Backend interface {
	WorkerBackend
	// PutBatchRun creates or replaces a run's record; an ended run's record
	// gets its expiry from the tenant's retention.
	PutBatchRun(ctx context.Context, r store.BatchRun) error
	// BatchRun returns a run's record (a NotFound Connect error, or one
	// wrapping store.ErrNotFound, when there is none).
	BatchRun(ctx context.Context, tenantID, runID string) (store.BatchRun, error)
	// BatchResults returns a page of a run's results (store.BatchStore's
	// BatchResults): more reports whether results follow it.
	BatchResults(ctx context.Context, tenantID, runID string, q store.BatchResultQuery) (page []store.BatchResult, more bool, err error)
	// BatchCap returns the tenant's batch spend cap (CPU time).
	BatchCap(ctx context.Context, tenantID string) (time.Duration, error)
	// BatchArchiveLink signs a link to a run's archive valid for ttl; it
	// returns the link's path (from the backend's root) and expiry.
	BatchArchiveLink(ctx context.Context, tenantID, runID string, ttl time.Duration) (string, time.Time, error)
	// SweepBatchRuns deletes the runs whose retention has passed (the
	// reaper calls it on every sweep) and returns how many.
	SweepBatchRuns(ctx context.Context) (int, error)
	// RotateBatchLinkKey replaces the tenant's link key: every link signed
	// before stops working.
	RotateBatchLinkKey(ctx context.Context, tenantID string) error
}

func toStore(tenant, run string, r Result) store.BatchResult {
	return store.BatchResult{TenantID: tenant, RunID: run, Game: r.N, Map: r.MapName, Seed: r.Seed, Side: r.Side,
		Winner: r.Winner, Ticks: r.Ticks, Ended: r.Ended, TimedOut: r.TimedOut, CPUNanos: int64(r.CPU),
		Result: r.Result, Log: r.Log, Error: r.Error, Worker: r.Worker}
}

// FromStore converts a stored result (the map index is not stored: Map is -1).
func FromStore(b store.BatchResult) Result {
	return Result{Game: Game{N: b.Game, Map: -1, Seed: b.Seed, Side: b.Side}, MapName: b.Map, Winner: b.Winner,
		Ticks: b.Ticks, Ended: b.Ended, TimedOut: b.TimedOut, CPU: time.Duration(b.CPUNanos),
		Result: json.RawMessage(b.Result), Log: b.Log, Error: b.Error, Worker: b.Worker}
}

// runRecord is the backend's record of a run as etcd has it.
func runRecord(r clusterstate.BatchRun, p clusterstate.BatchProgress) store.BatchRun {
	state := "running"
	if r.State == clusterstate.BatchEnded {
		state = "ended"
	}
	return store.BatchRun{TenantID: r.Tenant, RunID: r.ID, Spec: r.Spec, State: state, Reason: r.Reason, Games: r.Games,
		Done: p.Done, CPUNanos: p.CPU, CreatedAt: r.CreatedAt, EndedAt: r.EndedAt}
}
