package clusterstate

// Batch runs (package batch): a queue of headless games per run, leased by
// workers one game at a time.
//
// Key layout:
//
//	/ludus/batchruns/{tenant}/{run}              BatchRun JSON: spec, state, deadline, budget
//	/ludus/batch/{tenant}/{run}/items/{n}        one item per game not yet acknowledged
//	                                             (n as 8 hex digits, so keys sort by game)
//	/ludus/batch/{tenant}/{run}/leases/{n}       BatchLease JSON of the worker playing item n,
//	                                             bound to that worker's etcd lease; its create
//	                                             revision fences the acknowledgement
//	/ludus/batch/{tenant}/{run}/attempts/{n}     how many claims of item n were not given back
//	                                             (decimal): written by every claim, lowered by
//	                                             a release, outlives the lease key
//	/ludus/batch/{tenant}/{run}/progress         BatchProgress JSON, updated with every ack
//	/ludus/batchledger/{tenant}                  BatchLedger JSON: CPU settled by ended runs;
//	                                             written by every admission and every settle,
//	                                             so admissions are serialized per tenant
//	/ludus/batchcharges/{tenant}/{run}/{n}-{fence}
//	                                             a charge of a claim's CPU (ChargeBatchCPU)
//	                                             that may be tried again; deleted once seen
//	                                             through
//
// A run is admitted (AdmitBatchRun, state "admitting"), filled with items
// (PutBatchItems, at most batchPutOps per transaction) and started
// (StartBatchRun, "running"). A worker claims an item (ClaimBatchItem), plays
// it, stores its result in the backend, and only then acknowledges it
// (AckBatchItem): one transaction, fenced on its lease key, that deletes the
// item and its lease key and counts the game in the progress. A worker that
// dies loses its etcd lease; its lease keys vanish and its items are free
// again. Each claim counts an attempt of the item, and a worker that gives an
// item back unplayed (ReleaseBatchItem: shutting down, or the backend
// unreachable) takes its attempt back, so the count is the number of leases
// lost while playing the game (workers that died, games the reaper found
// overdue): package batch records a game that lost too many as failed
// instead of queueing it forever. EndBatchRun ends a run (complete,
// deadline, budget, canceled, orphaned) and settles its CPU into the
// tenant's ledger in the same transaction, whoever calls it, so usage is
// recorded exactly once even when the launcher is gone. A worker watches
// the lease key of each game it plays (WatchBatchClaim) and stops the game
// once the key is gone — the run ended, or the claim was ended — and the
// CPU of a game that is not acknowledged is charged to its run all the
// same (ChargeBatchCPU): into its progress while it runs, else into its
// final progress and the tenant's settled spend.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Batch run states.
const (
	BatchAdmitting = "admitting"
	BatchRunning   = "running"
	BatchEnded     = "ended"
)

// Reasons a batch run ended.
const (
	BatchComplete = "complete" // every game is in
	BatchDeadline = "deadline" // its wall-clock deadline passed
	BatchBudget   = "budget"   // its CPU budget was spent
	BatchCanceled = "canceled" // CancelRun
	BatchOrphaned = "orphaned" // its launcher vanished before the queue was filled
)

// Batch errors.
var (
	// ErrBatchRunNotFound: no such run (or not this tenant's).
	ErrBatchRunNotFound = errors.New("clusterstate: batch run not found")
	// ErrBatchRunExists: a run with this id exists.
	ErrBatchRunExists = errors.New("clusterstate: batch run exists")
	// ErrBatchNotRunning: the run is not (or no longer) running.
	ErrBatchNotRunning = errors.New("clusterstate: batch run not running")
	// ErrBatchLeaseLost: the item's lease key is gone or belongs to another
	// claim (the worker's lease expired, or the run ended); nothing was written.
	ErrBatchLeaseLost = errors.New("clusterstate: batch item lease lost")
	// ErrBatchCap: admitting the run would exceed the tenant's spend cap
	// (a *BatchCapError says by how much).
	ErrBatchCap = errors.New("clusterstate: batch spend cap exceeded")
	// errBatchConflict: a compared key changed; read again and retry.
	errBatchConflict = errors.New("clusterstate: batch state changed concurrently")
)

// BatchRun is a batch run's record.
type BatchRun struct {
	Tenant string `json:"tenant"`
	ID     string `json:"id"`
	State  string `json:"state"`
	// Reason is why an ended run ended.
	Reason string `json:"reason,omitempty"`
	Games  int    `json:"games"`
	// Deadline is the run's hard wall-clock deadline.
	Deadline time.Time `json:"deadline"`
	// BudgetCPU is the run's CPU budget in nanoseconds: its worst case.
	BudgetCPU int64 `json:"budget_cpu_ns"`
	// Spec is package batch's description of the run (opaque here).
	Spec      json.RawMessage `json:"spec,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	EndedAt   time.Time       `json:"ended_at,omitzero"`
	// Final is the progress when the run ended.
	Final BatchProgress `json:"final,omitzero"`
	// Recorded is set once the ended run was recorded in the backend.
	Recorded bool `json:"recorded,omitempty"`

	// Rev is the record's mod revision as read.
	Rev int64 `json:"-"`
}

// BatchProgress counts a run's acknowledged games.
type BatchProgress struct {
	// Done counts every acknowledged game, Failed and TimedOut included.
	Done     int   `json:"done"`
	Failed   int   `json:"failed,omitempty"`
	TimedOut int   `json:"timed_out,omitempty"`
	CPU      int64 `json:"cpu_ns"`
	// Ticks counts the ticks the acknowledged games played.
	Ticks int64 `json:"ticks"`
}

// BatchLedger is a tenant's batch spending.
type BatchLedger struct {
	// Settled is the CPU of ended runs, in nanoseconds.
	Settled int64 `json:"settled_cpu_ns"`
	// Admitted counts admissions (each one rewrites the ledger).
	Admitted int64 `json:"admitted"`
}

// BatchLease is the value of an item's lease key.
type BatchLease struct {
	Worker  string    `json:"worker"`
	Claim   string    `json:"claim"`
	At      time.Time `json:"at"`
	Attempt int       `json:"attempt"`

	raw string // the value as read
}

// BatchClaim is a worker's claim of one item.
type BatchClaim struct {
	Tenant, Run string
	N           int
	// Item is the item's value (package batch's game description).
	Item []byte
	// Owner is the lease key's value and Fence its create revision.
	Owner string
	Fence int64
	// Attempt counts this claim among the item's attempts: 1 the first time,
	// n+1 after n leases on it were lost (never given back).
	Attempt int
}

// BatchOutcome is what an acknowledgement counts.
type BatchOutcome struct {
	Failed, TimedOut bool
	CPU              int64 // nanoseconds
	Ticks            int64
}

// BatchCapError is the refusal of a run by the spend cap, with the numbers
// (CPU nanoseconds): Settled + Accrued + Reserved + New > Cap.
type BatchCapError struct {
	// Settled is the CPU of ended runs; Accrued what running runs spent so
	// far; Reserved the rest of running runs' worst cases (their budgets);
	// New the new run's worst case; Cap the tenant's cap.
	Settled, Accrued, Reserved, New, Cap int64
}

func (e *BatchCapError) Error() string {
	s := func(ns int64) string { return strconv.FormatFloat(float64(ns)/1e9, 'f', 1, 64) }
	return fmt.Sprintf("batch spend cap: settled %s + accrued %s + running runs' worst case %s + this run's worst case %s = %s CPU-seconds exceeds the cap of %s",
		s(e.Settled), s(e.Accrued), s(e.Reserved), s(e.New), s(e.Settled+e.Accrued+e.Reserved+e.New), s(e.Cap))
}

func (e *BatchCapError) Unwrap() error { return ErrBatchCap }

// Key builders of batch runs.
func BatchRunsPrefix(tenant string) string  { return Prefix + "batchruns/" + tenant + "/" }
func BatchRunKey(tenant, run string) string { return BatchRunsPrefix(tenant) + run }
func BatchPrefix(tenant, run string) string { return Prefix + "batch/" + tenant + "/" + run + "/" }
func BatchItemsPrefix(tenant, run string) string {
	return BatchPrefix(tenant, run) + "items/"
}
func BatchItemKey(tenant, run string, n int) string {
	return fmt.Sprintf("%s%08x", BatchItemsPrefix(tenant, run), n)
}
func BatchLeasesPrefix(tenant, run string) string { return BatchPrefix(tenant, run) + "leases/" }
func BatchLeaseKey(tenant, run string, n int) string {
	return fmt.Sprintf("%s%08x", BatchLeasesPrefix(tenant, run), n)
}
func BatchAttemptsKey(tenant, run string, n int) string {
	return fmt.Sprintf("%sattempts/%08x", BatchPrefix(tenant, run), n)
}
func BatchProgressKey(tenant, run string) string { return BatchPrefix(tenant, run) + "progress" }
func BatchLedgerKey(tenant string) string        { return Prefix + "batchledger/" + tenant }
func BatchChargesPrefix(tenant, run string) string {
	return Prefix + "batchcharges/" + tenant + "/" + run + "/"
}
func BatchChargeKey(cl BatchClaim) string {
	return fmt.Sprintf("%s%08x-%x", BatchChargesPrefix(cl.Tenant, cl.Run), cl.N, cl.Fence)
}

func allBatchRunsPrefix() string { return Prefix + "batchruns/" }
func allBatchPrefix() string     { return Prefix + "batch/" }

// batchPutOps bounds the operations of one transaction (etcd's default
// --max-txn-ops is 128).
const batchPutOps = 100

func batchItemN(k string) (int, bool) {
	v, err := strconv.ParseUint(lastSegment(k), 16, 31)
	return int(v), err == nil
}

func decodeBatchRun(kv []byte, rev int64) (BatchRun, error) {
	var r BatchRun
	if err := json.Unmarshal(kv, &r); err != nil {
		return r, fmt.Errorf("clusterstate: batch run record: %w", err)
	}
	r.Rev = rev
	return r, nil
}

// worstCase is what a running run may still cost, counted with what it spent:
// its budget, or what it spent if an in-flight game overshot it.
func worstCase(r BatchRun, p BatchProgress) (accrued, reserved int64) {
	return p.CPU, max(r.BudgetCPU-p.CPU, 0)
}

// MaxLiveBatchRuns is how many batch runs of a tenant may be admitted and
// not ended at once: each queues an etcd key per game until it ends, and
// etcd is every game's.
const MaxLiveBatchRuns = 8

// MaxLiveBatchGames is how many games a tenant's runs that have not ended
// may hold together (a run alone may have batch.MaxGames).
const MaxLiveBatchGames = 200_000

// ErrTooManyBatchRuns: AdmitBatchRun for a tenant with MaxLiveBatchRuns
// runs that have not ended.
var ErrTooManyBatchRuns = errors.New("clusterstate: too many batch runs")

// AdmitBatchRun records run (state admitting) if the tenant's spend allows
// it: settled + accrued + every unended run's remaining worst case + the new
// run's worst case (run.BudgetCPU) must not exceed capCPU (nanoseconds),
// else a *BatchCapError; and if the tenant has fewer than MaxLiveBatchRuns
// runs that have not ended, holding with this one at most MaxLiveBatchGames
// games, else ErrTooManyBatchRuns. The check and the
// write are one transaction fenced on the tenant's ledger, so concurrent
// admissions cannot both squeeze under the bounds. ErrBatchRunExists if the
// id is taken.
func (c *Client) AdmitBatchRun(ctx context.Context, run BatchRun, capCPU int64) error {
	run.State = BatchAdmitting
	for range 20 {
		err := c.admitOnce(ctx, run, capCPU)
		if !errors.Is(err, errBatchConflict) {
			return err
		}
	}
	return fmt.Errorf("clusterstate: admit batch run %s: too much contention on the tenant's ledger", run.ID)
}

func (c *Client) admitOnce(ctx context.Context, run BatchRun, capCPU int64) error {
	ledger, lrev, err := c.batchLedger(ctx, run.Tenant)
	if err != nil {
		return err
	}
	runs, err := c.BatchRuns(ctx, run.Tenant)
	if err != nil {
		return err
	}
	ce := BatchCapError{Settled: ledger.Settled, New: run.BudgetCPU, Cap: capCPU}
	live, games := 0, run.Games
	for _, r := range runs {
		if r.State == BatchEnded {
			continue
		}
		if live++; live >= MaxLiveBatchRuns {
			return fmt.Errorf("%w: the tenant has %d runs that have not ended, the most it may; wait for one to end, or cancel one (CancelRun)",
				ErrTooManyBatchRuns, live)
		}
		if games += r.Games; games > MaxLiveBatchGames {
			return fmt.Errorf("%w: the tenant's runs that have not ended hold %d games, and this one %d more; at most %d may be queued: "+
				"wait for a run to end, or cancel one (CancelRun)", ErrTooManyBatchRuns, games-run.Games, run.Games, MaxLiveBatchGames)
		}
		p, _, err := c.batchProgress(ctx, r.Tenant, r.ID)
		if err != nil {
			return err
		}
		a, res := worstCase(r, p)
		ce.Accrued += a
		ce.Reserved += res
	}
	if ce.Settled+ce.Accrued+ce.Reserved+ce.New > ce.Cap {
		return &ce
	}
	ledger.Admitted++
	lb, _ := json.Marshal(ledger)
	rb, err := json.Marshal(run)
	if err != nil {
		return err
	}
	pb, _ := json.Marshal(BatchProgress{})
	lk, rk := BatchLedgerKey(run.Tenant), BatchRunKey(run.Tenant, run.ID)
	resp, err := c.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(lk), "=", lrev),
		clientv3.Compare(clientv3.CreateRevision(rk), "=", 0),
	).Then(
		clientv3.OpPut(lk, string(lb)),
		clientv3.OpPut(rk, string(rb)),
		clientv3.OpPut(BatchProgressKey(run.Tenant, run.ID), string(pb)),
	).Else(clientv3.OpGet(rk, clientv3.WithCountOnly())).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		if resp.Responses[0].GetResponseRange().Count > 0 {
			return fmt.Errorf("%w: %s", ErrBatchRunExists, run.ID)
		}
		return errBatchConflict
	}
	return nil
}

func (c *Client) batchLedger(ctx context.Context, tenant string) (BatchLedger, int64, error) {
	var l BatchLedger
	resp, err := c.cli.Get(ctx, BatchLedgerKey(tenant))
	if err != nil {
		return l, 0, err
	}
	if len(resp.Kvs) == 0 {
		return l, 0, nil
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &l); err != nil {
		return l, 0, fmt.Errorf("clusterstate: batch ledger of %s: %w", tenant, err)
	}
	return l, resp.Kvs[0].ModRevision, nil
}

// BatchLedger returns a tenant's batch ledger (zero if it never ran one).
func (c *Client) BatchLedger(ctx context.Context, tenant string) (BatchLedger, error) {
	l, _, err := c.batchLedger(ctx, tenant)
	return l, err
}

func (c *Client) batchProgress(ctx context.Context, tenant, run string) (BatchProgress, int64, error) {
	var p BatchProgress
	resp, err := c.cli.Get(ctx, BatchProgressKey(tenant, run))
	if err != nil {
		return p, 0, err
	}
	if len(resp.Kvs) == 0 {
		return p, 0, nil
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &p); err != nil {
		return p, 0, fmt.Errorf("clusterstate: batch progress of %s: %w", run, err)
	}
	return p, resp.Kvs[0].ModRevision, nil
}

// PutBatchItems adds items (value by game number) to a run, in transactions
// of at most batchPutOps items, each only if the run's record exists (items
// put after the run ended are an orphaned queue, which the reaper removes).
func (c *Client) PutBatchItems(ctx context.Context, tenant, run string, items map[int][]byte) error {
	ns := make([]int, 0, len(items))
	for n := range items {
		ns = append(ns, n)
	}
	rk := BatchRunKey(tenant, run)
	for len(ns) > 0 {
		k := min(len(ns), batchPutOps)
		ops := make([]clientv3.Op, 0, k)
		for _, n := range ns[:k] {
			ops = append(ops, clientv3.OpPut(BatchItemKey(tenant, run, n), string(items[n])))
		}
		ns = ns[k:]
		resp, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(rk), ">", 0)).
			Then(ops...).Commit()
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			return fmt.Errorf("%w: %s", ErrBatchRunNotFound, run)
		}
	}
	return nil
}

// StartBatchRun moves an admitting run to running: workers may claim its items.
func (c *Client) StartBatchRun(ctx context.Context, tenant, run string) error {
	return c.updateBatchRun(ctx, tenant, run, func(r *BatchRun) error {
		if r.State != BatchAdmitting {
			return fmt.Errorf("%w: %s is %s", ErrBatchNotRunning, run, r.State)
		}
		r.State = BatchRunning
		return nil
	})
}

// updateBatchRun applies fn to the run's record in a compare-and-swap loop.
func (c *Client) updateBatchRun(ctx context.Context, tenant, run string, fn func(r *BatchRun) error) error {
	for range 20 {
		r, err := c.BatchRun(ctx, tenant, run)
		if err != nil {
			return err
		}
		if err := fn(&r); err != nil {
			return err
		}
		b, _ := json.Marshal(r)
		k := BatchRunKey(tenant, run)
		resp, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", r.Rev)).Then(clientv3.OpPut(k, string(b))).Commit()
		if err != nil {
			return err
		}
		if resp.Succeeded {
			return nil
		}
	}
	return fmt.Errorf("clusterstate: batch run %s: too much contention", run)
}

// BatchRun reads a run's record.
func (c *Client) BatchRun(ctx context.Context, tenant, run string) (BatchRun, error) {
	resp, err := c.cli.Get(ctx, BatchRunKey(tenant, run))
	if err != nil {
		return BatchRun{}, err
	}
	if len(resp.Kvs) == 0 {
		return BatchRun{}, fmt.Errorf("%w: %s", ErrBatchRunNotFound, run)
	}
	return decodeBatchRun(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
}

// BatchRunProgress reads a run's record and progress (an ended run's
// progress is its Final).
func (c *Client) BatchRunProgress(ctx context.Context, tenant, run string) (BatchRun, BatchProgress, error) {
	r, err := c.BatchRun(ctx, tenant, run)
	if err != nil {
		return r, BatchProgress{}, err
	}
	if r.State == BatchEnded {
		return r, r.Final, nil
	}
	p, _, err := c.batchProgress(ctx, tenant, run)
	return r, p, err
}

// BatchRuns lists a tenant's runs, or every tenant's with tenant "".
func (c *Client) BatchRuns(ctx context.Context, tenant string) ([]BatchRun, error) {
	p := allBatchRunsPrefix()
	if tenant != "" {
		p = BatchRunsPrefix(tenant)
	}
	resp, err := c.cli.Get(ctx, p, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	runs := make([]BatchRun, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		r, err := decodeBatchRun(kv.Value, kv.ModRevision)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	return runs, nil
}

// ClaimBatchItem claims the first free item of a running run at or after
// game from (wrapping around once) for worker under lease: one transaction
// that creates the item's lease key bound to the lease and counts the
// attempt, only if the key does not exist, the item does and its attempt
// count is as read. It returns false when no item is free.
func (c *Client) ClaimBatchItem(ctx context.Context, lease *Lease, worker, tenant, run string, from int) (BatchClaim, bool, error) {
	for _, start := range []int{from, 0} {
		cl, ok, err := c.claimFrom(ctx, lease, worker, tenant, run, start)
		if err != nil || ok {
			return cl, ok, err
		}
		if start == 0 {
			break
		}
	}
	return BatchClaim{}, false, nil
}

func (c *Client) claimFrom(ctx context.Context, lease *Lease, worker, tenant, run string, from int) (BatchClaim, bool, error) {
	ip, lp := BatchItemsPrefix(tenant, run), BatchLeasesPrefix(tenant, run)
	const page = 64
	start := from
	for {
		// One read transaction: a page of items and the lease keys in its range.
		ik := BatchItemKey(tenant, run, start)
		resp, err := c.cli.Txn(ctx).Then(
			clientv3.OpGet(ik, clientv3.WithRange(clientv3.GetPrefixRangeEnd(ip)), clientv3.WithLimit(page)),
			clientv3.OpGet(BatchLeaseKey(tenant, run, start), clientv3.WithRange(clientv3.GetPrefixRangeEnd(lp)), clientv3.WithKeysOnly(), clientv3.WithLimit(4*page)),
		).Commit()
		if err != nil {
			return BatchClaim{}, false, err
		}
		items := resp.Responses[0].GetResponseRange().Kvs
		if len(items) == 0 {
			return BatchClaim{}, false, nil
		}
		leased := map[string]bool{}
		for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
			leased[lastSegment(string(kv.Key))] = true
		}
		for _, kv := range items {
			seg := lastSegment(string(kv.Key))
			if leased[seg] {
				continue
			}
			n, ok := batchItemN(string(kv.Key))
			if !ok {
				continue
			}
			ak := BatchAttemptsKey(tenant, run, n)
			ar, err := c.cli.Get(ctx, ak)
			if err != nil {
				return BatchClaim{}, false, err
			}
			attempts, arev := 0, int64(0)
			if len(ar.Kvs) > 0 {
				attempts, _ = strconv.Atoi(string(ar.Kvs[0].Value))
				arev = ar.Kvs[0].ModRevision
			}
			attempt := attempts + 1
			bl := BatchLease{Worker: worker, Claim: newClaimID(), At: time.Now().UTC(), Attempt: attempt}
			vb, _ := json.Marshal(bl)
			lk := BatchLeaseKey(tenant, run, n)
			tr, err := c.cli.Txn(ctx).If(
				clientv3.Compare(clientv3.CreateRevision(lk), "=", 0),
				clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", kv.CreateRevision),
				clientv3.Compare(clientv3.ModRevision(ak), "=", arev),
			).Then(
				clientv3.OpPut(lk, string(vb), clientv3.WithLease(clientv3.LeaseID(lease.ID()))),
				clientv3.OpPut(ak, strconv.Itoa(attempt)),
			).Commit()
			if err != nil {
				fence, made := c.claimMade(ctx, lease, lk, string(vb))
				if !made {
					return BatchClaim{}, false, err
				}
				return BatchClaim{Tenant: tenant, Run: run, N: n, Item: kv.Value, Owner: string(vb), Fence: fence, Attempt: attempt}, true, nil
			}
			if tr.Succeeded {
				return BatchClaim{Tenant: tenant, Run: run, N: n, Item: kv.Value, Owner: string(vb), Fence: tr.Header.Revision, Attempt: attempt}, true, nil
			}
		}
		if len(items) < page {
			return BatchClaim{}, false, nil
		}
		last, _ := batchItemN(string(items[len(items)-1].Key))
		start = last + 1
	}
}

// claimMade tells, after a claim transaction whose answer was lost, whether
// etcd made the claim all the same: lease key lk then holds owner, the
// claim's own value (its claim id is unique), and its create revision is the
// claim's fence. Taken for failed, such a claim would hold the game, bound to
// a lease that lives on, unplayed until the reaper's item timeout ended it as
// a lost attempt. It reads the key until etcd answers, the lease is lost (the
// key goes with it) or ctx ends (the worker stops and revokes its lease).
func (c *Client) claimMade(ctx context.Context, lease *Lease, lk, owner string) (fence int64, made bool) {
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := c.cli.Get(rctx, lk)
		cancel()
		if err == nil {
			if len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) == owner {
				return resp.Kvs[0].CreateRevision, true
			}
			return 0, false
		}
		select {
		case <-ctx.Done():
			return 0, false
		case <-lease.Done():
			return 0, false
		case <-time.After(delay):
		}
	}
}

// AckBatchItem acknowledges a claimed item whose result is stored: one
// transaction, fenced on the claim's lease key (value and create revision),
// deletes the item, its lease key and its attempt count and counts the
// outcome in the run's progress. ErrBatchLeaseLost when the claim is no
// longer the lease key's (nothing is written: another worker has or will
// play the game, and the result store keeps the first result). It returns
// the new progress.
func (c *Client) AckBatchItem(ctx context.Context, cl BatchClaim, o BatchOutcome) (BatchProgress, error) {
	lk, ik, pk := BatchLeaseKey(cl.Tenant, cl.Run, cl.N), BatchItemKey(cl.Tenant, cl.Run, cl.N), BatchProgressKey(cl.Tenant, cl.Run)
	ak := BatchAttemptsKey(cl.Tenant, cl.Run, cl.N)
	for range 50 {
		p, prev, err := c.batchProgress(ctx, cl.Tenant, cl.Run)
		if err != nil {
			return p, err
		}
		if prev == 0 {
			return p, fmt.Errorf("%w: run %s has no progress record (it ended)", ErrBatchLeaseLost, cl.Run)
		}
		p.Done++
		p.CPU += o.CPU
		p.Ticks += o.Ticks
		if o.Failed {
			p.Failed++
		}
		if o.TimedOut {
			p.TimedOut++
		}
		pb, _ := json.Marshal(p)
		resp, err := c.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.Value(lk), "=", cl.Owner),
			clientv3.Compare(clientv3.CreateRevision(lk), "=", cl.Fence),
			clientv3.Compare(clientv3.ModRevision(pk), "=", prev),
		).Then(
			clientv3.OpDelete(ik), clientv3.OpDelete(lk), clientv3.OpDelete(ak), clientv3.OpPut(pk, string(pb)),
		).Else(clientv3.OpGet(lk)).Commit()
		if err != nil {
			return p, err
		}
		if resp.Succeeded {
			return p, nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || string(kvs[0].Value) != cl.Owner || kvs[0].CreateRevision != cl.Fence {
			return p, fmt.Errorf("%w: run %s game %d", ErrBatchLeaseLost, cl.Run, cl.N)
		}
		// The progress moved under us (another ack): read it again.
	}
	return BatchProgress{}, fmt.Errorf("clusterstate: ack of run %s game %d: too much contention", cl.Run, cl.N)
}

// ReleaseBatchItem gives a claimed item back to the queue (a worker shutting
// down before it could finish it, or unable to store its result), if the
// claim is still the lease key's, and takes the claim's attempt back: the
// game did not lose its worker. While the lease key is the claim's nobody
// else writes the attempt count, so it is the claim's Attempt.
func (c *Client) ReleaseBatchItem(ctx context.Context, cl BatchClaim) error {
	lk, ak := BatchLeaseKey(cl.Tenant, cl.Run, cl.N), BatchAttemptsKey(cl.Tenant, cl.Run, cl.N)
	back := clientv3.OpDelete(ak)
	if cl.Attempt > 1 {
		back = clientv3.OpPut(ak, strconv.Itoa(cl.Attempt-1))
	}
	_, err := c.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.Value(lk), "=", cl.Owner),
		clientv3.Compare(clientv3.CreateRevision(lk), "=", cl.Fence),
	).Then(clientv3.OpDelete(lk), back).Commit()
	return err
}

// BatchLeases returns the lease keys of a run's items being played, by game.
func (c *Client) BatchLeases(ctx context.Context, tenant, run string) (map[int]BatchLease, error) {
	resp, err := c.cli.Get(ctx, BatchLeasesPrefix(tenant, run), clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make(map[int]BatchLease, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		n, ok := batchItemN(string(kv.Key))
		if !ok {
			continue
		}
		var l BatchLease
		if json.Unmarshal(kv.Value, &l) == nil {
			l.raw = string(kv.Value)
			out[n] = l
		}
	}
	return out, nil
}

// ExpireBatchLease deletes item n's lease key if it still holds l as read by
// BatchLeases (the reaper
// ending an overdue game: the item goes back to the queue and the late
// worker's acknowledgement will fail).
func (c *Client) ExpireBatchLease(ctx context.Context, tenant, run string, n int, l BatchLease) error {
	lk := BatchLeaseKey(tenant, run, n)
	_, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(lk), "=", l.raw)).Then(clientv3.OpDelete(lk)).Commit()
	return err
}

// BatchItemsLeft counts a run's unacknowledged items.
func (c *Client) BatchItemsLeft(ctx context.Context, tenant, run string) (int, error) {
	resp, err := c.cli.Get(ctx, BatchItemsPrefix(tenant, run), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return int(resp.Count), nil
}

// EndBatchRun ends a run that has not ended, for reason: in one transaction
// it marks the record ended with its final progress, adds the run's CPU to
// the tenant's settled spend, and deletes the run's queue (items, lease keys,
// progress), so in-flight acknowledgements fail. It reports whether this call
// ended it (false: it had ended already).
func (c *Client) EndBatchRun(ctx context.Context, tenant, run, reason string, now time.Time) (bool, error) {
	for range 50 {
		r, err := c.BatchRun(ctx, tenant, run)
		if err != nil {
			return false, err
		}
		if r.State == BatchEnded {
			return false, nil
		}
		p, prev, err := c.batchProgress(ctx, tenant, run)
		if err != nil {
			return false, err
		}
		l, lrev, err := c.batchLedger(ctx, tenant)
		if err != nil {
			return false, err
		}
		r.State, r.Reason, r.EndedAt, r.Final = BatchEnded, reason, now.UTC(), p
		l.Settled += p.CPU
		rb, _ := json.Marshal(r)
		lb, _ := json.Marshal(l)
		rk, lk, pk := BatchRunKey(tenant, run), BatchLedgerKey(tenant), BatchProgressKey(tenant, run)
		resp, err := c.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(rk), "=", r.Rev),
			clientv3.Compare(clientv3.ModRevision(lk), "=", lrev),
			clientv3.Compare(clientv3.ModRevision(pk), "=", prev),
		).Then(
			clientv3.OpPut(rk, string(rb)),
			clientv3.OpPut(lk, string(lb)),
			clientv3.OpDelete(BatchPrefix(tenant, run), clientv3.WithPrefix()),
		).Commit()
		if err != nil {
			return false, err
		}
		if resp.Succeeded {
			return true, nil
		}
	}
	return false, fmt.Errorf("clusterstate: end batch run %s: too much contention", run)
}

// MarkBatchRunRecorded sets Recorded on an ended run's record if the record
// is still as read at revision rev (the one written to the backend): a
// charge that came in meanwhile (ChargeBatchCPU) changed its final CPU, and
// the record must be written again. It reports whether it marked it.
func (c *Client) MarkBatchRunRecorded(ctx context.Context, tenant, run string, rev int64) (bool, error) {
	r, err := c.BatchRun(ctx, tenant, run)
	if err != nil || r.Rev != rev {
		return false, err
	}
	r.Recorded = true
	b, _ := json.Marshal(r)
	k := BatchRunKey(tenant, run)
	resp, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).Then(clientv3.OpPut(k, string(b))).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// RemoveBatchRun deletes a run's record and whatever is left of its queue
// and its charges.
func (c *Client) RemoveBatchRun(ctx context.Context, tenant, run string) error {
	_, err := c.cli.Txn(ctx).Then(
		clientv3.OpDelete(BatchRunKey(tenant, run)),
		clientv3.OpDelete(BatchPrefix(tenant, run), clientv3.WithPrefix()),
		clientv3.OpDelete(BatchChargesPrefix(tenant, run), clientv3.WithPrefix()),
	).Commit()
	return err
}

// ChargeBatchCPU counts cpu (nanoseconds) that claim cl's game spent without
// being acknowledged — it was stopped (its run ended, its claim was ended
// or its lease lost, its worker stopped), or its result could not be stored
// or acknowledged — so that a run's spend is the CPU of all its games, not
// only of those acknowledged. While the run has not ended the CPU goes into
// its progress (against its budget, and as accrued spend against the
// tenant's cap); once it has, into its final progress and the tenant's
// settled spend in one transaction, and the record loses Recorded, so that
// the backend's record is written again. A call tried again after an error
// counts nothing more if the first one counted: the transaction also writes
// the claim's charge key (BatchChargeKey) and happens only if it is absent,
// and the key is deleted once a call has seen the charge through (so call
// it again only after an error). It returns the run and its progress after
// the charge; ErrBatchRunNotFound if the run's record is gone.
func (c *Client) ChargeBatchCPU(ctx context.Context, cl BatchClaim, cpu int64) (BatchRun, BatchProgress, error) {
	mk := BatchChargeKey(cl)
	rk, pk, lk := BatchRunKey(cl.Tenant, cl.Run), BatchProgressKey(cl.Tenant, cl.Run), BatchLedgerKey(cl.Tenant)
	for range 50 {
		r, err := c.BatchRun(ctx, cl.Tenant, cl.Run)
		if err != nil {
			return r, BatchProgress{}, err
		}
		var p BatchProgress
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(mk), "=", 0)}
		ops := []clientv3.Op{clientv3.OpPut(mk, strconv.FormatInt(cpu, 10))}
		if r.State == BatchEnded {
			l, lrev, err := c.batchLedger(ctx, cl.Tenant)
			if err != nil {
				return r, p, err
			}
			r.Final.CPU += cpu
			r.Recorded = false
			l.Settled += cpu
			p = r.Final
			rb, _ := json.Marshal(r)
			lb, _ := json.Marshal(l)
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(rk), "=", r.Rev), clientv3.Compare(clientv3.ModRevision(lk), "=", lrev))
			ops = append(ops, clientv3.OpPut(rk, string(rb)), clientv3.OpPut(lk, string(lb)))
		} else {
			var prev int64
			if p, prev, err = c.batchProgress(ctx, cl.Tenant, cl.Run); err != nil {
				return r, p, err
			}
			if prev == 0 {
				continue // it ended between the two reads
			}
			p.CPU += cpu
			pb, _ := json.Marshal(p)
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(pk), "=", prev))
			ops = append(ops, clientv3.OpPut(pk, string(pb)))
		}
		resp, err := c.cli.Txn(ctx).If(cmps...).Then(ops...).Else(clientv3.OpGet(mk, clientv3.WithCountOnly())).Commit()
		if err != nil {
			return r, p, err
		}
		if !resp.Succeeded && resp.Responses[0].GetResponseRange().Count == 0 {
			continue // the run, its progress or the ledger moved: read again
		}
		// Charged, by this call or by an earlier one whose answer was lost:
		// the key has done its work. Left behind (this delete failing), it
		// goes with the run's record (RemoveBatchRun).
		_, _ = c.cli.Delete(ctx, mk)
		if resp.Succeeded {
			return r, p, nil
		}
		return c.BatchRunProgress(ctx, cl.Tenant, cl.Run)
	}
	return BatchRun{}, BatchProgress{}, fmt.Errorf("clusterstate: charge of run %s game %d: too much contention", cl.Run, cl.N)
}

// WatchBatchClaim returns a channel closed once claim cl no longer holds
// its item: the item's lease key is deleted or is another claim's — the run
// ended (EndBatchRun deletes its queue), the reaper ended the claim as
// overdue (ExpireBatchLease), or the claim's etcd lease expired. It watches
// from the claim's own revision on, so no change is missed, until ctx ends
// (the channel then stays open). While etcd is out of reach it sees nothing:
// the Lease the item was claimed under tells that.
func (c *Client) WatchBatchClaim(ctx context.Context, cl BatchClaim) <-chan struct{} {
	gone := make(chan struct{})
	lk := BatchLeaseKey(cl.Tenant, cl.Run, cl.N)
	go func() {
		from := cl.Fence + 1
		for ctx.Err() == nil {
			if c.claimLost(ctx, lk, cl, from) {
				close(gone)
				return
			}
			if ctx.Err() != nil {
				return
			}
			// The watch ended without a verdict (its start revision was
			// compacted away, or the client closed): read the key, and
			// watch on from there.
			resp, err := c.cli.Get(ctx, lk)
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				continue
			}
			if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != cl.Fence || string(resp.Kvs[0].Value) != cl.Owner {
				close(gone)
				return
			}
			from = resp.Header.Revision + 1
		}
	}()
	return gone
}

// claimLost watches lease key lk from revision from and reports whether it
// saw cl lose it; false when the watch ended first.
func (c *Client) claimLost(ctx context.Context, lk string, cl BatchClaim, from int64) bool {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range c.cli.Watch(wctx, lk, clientv3.WithRev(from)) {
		if wr.Err() != nil {
			return false
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete || ev.Kv.CreateRevision != cl.Fence {
				return true
			}
		}
	}
	return false
}

// OrphanedBatchQueues returns the (tenant, run) pairs that have queue keys
// but no run record, or whose run has ended (a queue left behind).
func (c *Client) OrphanedBatchQueues(ctx context.Context) ([][2]string, error) {
	resp, err := c.cli.Get(ctx, allBatchPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	seen := map[[2]string]bool{}
	var out [][2]string
	for _, kv := range resp.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), allBatchPrefix())
		parts := strings.SplitN(rest, "/", 3)
		if len(parts) < 3 {
			continue
		}
		k := [2]string{parts[0], parts[1]}
		if seen[k] {
			continue
		}
		seen[k] = true
		r, err := c.BatchRun(ctx, k[0], k[1])
		if errors.Is(err, ErrBatchRunNotFound) || err == nil && r.State == BatchEnded {
			out = append(out, k)
		} else if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// RemoveBatchQueue deletes a run's queue keys (not its record).
func (c *Client) RemoveBatchQueue(ctx context.Context, tenant, run string) error {
	_, err := c.cli.Delete(ctx, BatchPrefix(tenant, run), clientv3.WithPrefix())
	return err
}
