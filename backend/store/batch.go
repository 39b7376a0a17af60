package store

import (
	"context"
	"errors"
	"time"
)

// Batch runs (package batch) keep their results and the archive settings of
// each tenant in the backend's database. The methods are on BatchStore, which
// both SQL stores implement; the backend finds it with a type assertion so
// that Store itself (and its fakes) need not grow.

// BatchRun is a batch run as the backend keeps it: what it was, how it ended
// and when its archive expires.
type BatchRun struct {
	TenantID, RunID string
	// Spec is the run's spec (package batch's JSON).
	Spec []byte
	// State and Reason: "running", or "ended" with why.
	State, Reason string
	Games         int
	Done          int
	CPUNanos      int64
	CreatedAt     time.Time
	EndedAt       time.Time // zero while running
	// ExpiresAt is when the run's results and archive are deleted.
	ExpiresAt time.Time
}

// BatchResult is one game's result in a batch run.
type BatchResult struct {
	TenantID, RunID string
	Game            int
	Map             string
	Seed            uint64
	Side            int
	Winner          int
	Ticks           int64
	Ended, TimedOut bool
	CPUNanos        int64
	// Result is the module's result JSON.
	Result []byte
	// Log is the game's input log (package simnode/inputlog), if kept and
	// asked for (BatchResultQuery.WithLogs).
	Log []byte
	// LogBytes is the size of the kept log, set by the store whether or not
	// the log itself was read.
	LogBytes int
	Error    string
	Worker   string
	// StoredAt is set by the store.
	StoredAt time.Time
}

// MaxBatchResultPage bounds BatchResultQuery.Limit: a run holds up to
// 100,000 results of up to 1 MiB each, so nothing reads them all at once.
const MaxBatchResultPage = 1000

// BatchResultQuery selects a page of a run's results.
type BatchResultQuery struct {
	// Since selects results stored at or after it (zero: all).
	Since time.Time
	// FromGame selects games numbered FromGame or more.
	FromGame int
	// Limit is the most results in the page, 1..MaxBatchResultPage.
	Limit int
	// MaxBytes bounds the bytes of results and logs in the page (zero: no
	// bound); a page holds at least one result, however large.
	MaxBytes int
	// WithLogs reads each result's input log too.
	WithLogs bool
}

// BatchSettings are a tenant's batch settings.
type BatchSettings struct {
	// LinkKey signs the tenant's archive links (HMAC-SHA256); replacing it
	// revokes every link signed with the old one.
	LinkKey []byte
	// Retention is how long a run's results are kept after it ended; zero
	// means the backend's default.
	Retention time.Duration
	// CapCPUNanos is the tenant's batch spend cap; zero means the default.
	CapCPUNanos int64
}

// BatchStore keeps batch runs, their results and the tenants' batch settings.
type BatchStore interface {
	// PutBatchRun creates or replaces a run's record.
	PutBatchRun(ctx context.Context, r BatchRun) error
	// BatchRun returns a run's record (ErrNotFound).
	BatchRun(ctx context.Context, tenantID, runID string) (BatchRun, error)
	// PutBatchResult stores a game's result unless the run already has one
	// for that game: the first result stored wins, and stored reports whether
	// it was this one. ErrNotFound if the run has no record. With
	// maxRunBytes > 0, the run's results (result, log and error bytes, as
	// BatchResult.Size counts them) stay within it: a result that would take
	// them past it is not stored (ErrRunFull). The count is the run's own,
	// kept with its record in the same transaction.
	PutBatchResult(ctx context.Context, r BatchResult, maxRunBytes int64) (stored bool, err error)
	// BatchResults returns a page of a run's results, by game: those q
	// selects, at most q.Limit of them, and no more than q.MaxBytes of
	// results and logs unless one result alone holds more. more reports
	// whether results after the page match q (ask again from the last
	// game + 1). ErrInvalid for a limit outside 1..MaxBatchResultPage.
	BatchResults(ctx context.Context, tenantID, runID string, q BatchResultQuery) (page []BatchResult, more bool, err error)
	// BatchSettings returns a tenant's settings (ErrNotFound if never set).
	BatchSettings(ctx context.Context, tenantID string) (BatchSettings, error)
	// PutBatchPolicy sets a tenant's retention and spend cap (zero: the
	// defaults), keeping its link key whatever it is now.
	PutBatchPolicy(ctx context.Context, tenantID string, retention time.Duration, capCPUNanos int64) error
	// PutBatchLinkKey sets a tenant's link key, keeping its policy, and
	// returns the key in effect: with ifNone, a key the tenant has already
	// is kept and returned instead, so concurrent first links agree on it.
	PutBatchLinkKey(ctx context.Context, tenantID string, key []byte, ifNone bool) ([]byte, error)
	// DeleteExpiredBatchRuns deletes the runs (and their results) that
	// expired at or before now, at most limit; it returns how many.
	DeleteExpiredBatchRuns(ctx context.Context, now time.Time, limit int) (int, error)
}

// ErrRunFull: a batch run's stored results would pass their byte bound.
var ErrRunFull = errors.New("store: the batch run's stored results reached their bound")

// DefaultBatchRunBytes bounds the bytes of one run's stored results (the
// backend's default): a result may be 1 MiB and a kept log 16 MiB, which a
// module costs a millisecond of CPU to make, so the spend cap alone would
// let one run fill the database.
const DefaultBatchRunBytes = 2 << 30

// Size is what r counts against its run's byte bound.
func (r BatchResult) Size() int64 { return int64(len(r.Result) + len(r.Log) + len(r.Error)) }
