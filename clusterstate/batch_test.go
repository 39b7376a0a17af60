package clusterstate

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func admitRun(t *testing.T, tenant string, games int, budget time.Duration, capCPU time.Duration) BatchRun {
	t.Helper()
	ctx := testCtx(t)
	r := BatchRun{Tenant: tenant, ID: uniq("r"), Games: games, Deadline: time.Now().Add(time.Hour), BudgetCPU: int64(budget), CreatedAt: time.Now()}
	if err := state.AdmitBatchRun(ctx, r, int64(capCPU)); err != nil {
		t.Fatal(err)
	}
	items := map[int][]byte{}
	for n := range games {
		items[n] = []byte(`{}`)
	}
	if err := state.PutBatchItems(ctx, tenant, r.ID, items); err != nil {
		t.Fatal(err)
	}
	if err := state.StartBatchRun(ctx, tenant, r.ID); err != nil {
		t.Fatal(err)
	}
	return r
}

// Claims are exclusive; an acknowledgement is fenced on its claim; a claim
// whose lease ended frees the item and its late acknowledgement fails; an
// ended run refuses acknowledgements and settles its CPU once.
func TestBatchClaimAckAndLeaseLoss(t *testing.T) {
	ctx := testCtx(t)
	tenant := uniq("bt")
	r := admitRun(t, tenant, 3, time.Minute, time.Hour)
	a, b := grantLease(t), grantLease(t)
	claimed := map[int]string{}
	var ca BatchClaim
	for i := range 3 {
		l, w := a, "a"
		if i == 2 {
			l, w = b, "b"
		}
		cl, ok, err := state.ClaimBatchItem(ctx, l, w, tenant, r.ID, 0)
		if err != nil || !ok {
			t.Fatalf("claim %d: %v %v", i, ok, err)
		}
		if claimed[cl.N] != "" {
			t.Fatalf("game %d claimed twice", cl.N)
		}
		claimed[cl.N] = w
		if w == "a" && i == 0 {
			ca = cl
		}
	}
	if _, ok, err := state.ClaimBatchItem(ctx, b, "b", tenant, r.ID, 0); ok || err != nil {
		t.Fatalf("a fourth claim of three games: %v %v", ok, err)
	}
	p, err := state.AckBatchItem(ctx, ca, BatchOutcome{CPU: 5, Ticks: 7})
	if err != nil || p.Done != 1 || p.CPU != 5 || p.Ticks != 7 {
		t.Fatalf("ack: %+v %v", p, err)
	}
	if _, err := state.AckBatchItem(ctx, ca, BatchOutcome{CPU: 5}); !errors.Is(err, ErrBatchLeaseLost) {
		t.Fatalf("second ack of one claim: %v", err)
	}
	// a's lease ends: its other game is free again, and its ack fails.
	var other BatchClaim
	for n, w := range claimed {
		if w == "a" && n != ca.N {
			other = BatchClaim{Tenant: tenant, Run: r.ID, N: n}
		}
	}
	a.Close()
	cl, ok, err := state.ClaimBatchItem(ctx, b, "b", tenant, r.ID, 0)
	if err != nil || !ok || cl.N != other.N {
		t.Fatalf("after a's lease ended: claim %+v %v %v, want game %d", cl, ok, err, other.N)
	}
	if left, _ := state.BatchItemsLeft(ctx, tenant, r.ID); left != 2 {
		t.Fatalf("%d items left, want 2", left)
	}
	// End the run: b's claims can no longer be acknowledged, the CPU is settled once.
	if ended, err := state.EndBatchRun(ctx, tenant, r.ID, BatchCanceled, time.Now()); err != nil || !ended {
		t.Fatalf("end: %v %v", ended, err)
	}
	if ended, err := state.EndBatchRun(ctx, tenant, r.ID, BatchCanceled, time.Now()); err != nil || ended {
		t.Fatalf("second end: %v %v", ended, err)
	}
	if _, err := state.AckBatchItem(ctx, cl, BatchOutcome{CPU: 1}); !errors.Is(err, ErrBatchLeaseLost) {
		t.Fatalf("ack after the run ended: %v", err)
	}
	l, _ := state.BatchLedger(ctx, tenant)
	if l.Settled != 5 {
		t.Fatalf("settled %d, want 5", l.Settled)
	}
	if left, _ := state.BatchItemsLeft(ctx, tenant, r.ID); left != 0 {
		t.Fatalf("an ended run keeps %d items", left)
	}
}

// Concurrent admissions cannot both squeeze under the cap, and the refusal
// carries the numbers.
func TestBatchAdmissionCap(t *testing.T) {
	ctx := testCtx(t)
	tenant := uniq("bc")
	const capCPU = 10 * time.Second
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = state.AdmitBatchRun(ctx, BatchRun{Tenant: tenant, ID: uniq("r"), Games: 1, BudgetCPU: int64(3 * time.Second),
				Deadline: time.Now().Add(time.Hour)}, int64(capCPU))
		}()
	}
	wg.Wait()
	admitted := 0
	for _, err := range errs {
		var ce *BatchCapError
		switch {
		case err == nil:
			admitted++
		case errors.As(err, &ce):
			if !errors.Is(err, ErrBatchCap) || ce.New != int64(3*time.Second) || ce.Reserved != int64(9*time.Second) || ce.Cap != int64(capCPU) {
				t.Errorf("refusal %+v", ce)
			}
		default:
			t.Errorf("admission: %v", err)
		}
	}
	if admitted != 3 {
		t.Fatalf("%d runs of 3 s admitted under a 10 s cap, want 3", admitted)
	}
}

// TestBatchAdmissionBoundsLiveRuns: a tenant's runs that have not ended
// hold at most MaxLiveBatchGames games together, and number fewer than
// MaxLiveBatchRuns; past either, admission is ErrTooManyBatchRuns. Other
// tenants are not counted.
func TestBatchAdmissionBoundsLiveRuns(t *testing.T) {
	ctx := testCtx(t)
	tenant := uniq("bl")
	admit := func(tenant string, games int) error {
		return state.AdmitBatchRun(ctx, BatchRun{Tenant: tenant, ID: uniq("r"), Games: games, BudgetCPU: int64(time.Second),
			Deadline: time.Now().Add(time.Hour)}, int64(time.Hour))
	}
	if err := admit(tenant, MaxLiveBatchGames-1000); err != nil {
		t.Fatal(err)
	}
	if err := admit(tenant, 1001); !errors.Is(err, ErrTooManyBatchRuns) {
		t.Fatalf("games past the bound: %v, want ErrTooManyBatchRuns", err)
	}
	for i := 1; i < MaxLiveBatchRuns; i++ {
		if err := admit(tenant, 1); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	if err := admit(tenant, 1); !errors.Is(err, ErrTooManyBatchRuns) {
		t.Fatalf("a run past the bound: %v, want ErrTooManyBatchRuns", err)
	}
	if err := admit(uniq("bl2"), 1000); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
}

// A queue without a run record, or of an ended run, is orphaned.
func TestBatchOrphanedQueues(t *testing.T) {
	ctx := testCtx(t)
	tenant := uniq("bo")
	if err := state.PutBatchItems(ctx, tenant, "ghost", map[int][]byte{0: []byte(`{}`)}); !errors.Is(err, ErrBatchRunNotFound) {
		t.Fatalf("items of no run: %v", err)
	}
	if _, err := raw.Put(ctx, BatchItemKey(tenant, "ghost", 0), "{}"); err != nil {
		t.Fatal(err)
	}
	orphans, err := state.OrphanedBatchQueues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, o := range orphans {
		found = found || o == [2]string{tenant, "ghost"}
	}
	if !found {
		t.Fatalf("orphans %v lack %s/ghost", orphans, tenant)
	}
	if err := state.RemoveBatchQueue(ctx, tenant, "ghost"); err != nil {
		t.Fatal(err)
	}
	if n, _ := state.BatchItemsLeft(ctx, tenant, "ghost"); n != 0 {
		t.Fatalf("%d items left", n)
	}
}

// Every claim counts an attempt of its item; a lease lost (the worker's lease
// ended, or the reaper expired an overdue game) keeps it counted, a release
// takes it back, and the acknowledgement removes the count.
func TestBatchAttemptsCountLostLeases(t *testing.T) {
	ctx := testCtx(t)
	tenant := uniq("ba")
	r := admitRun(t, tenant, 1, time.Minute, time.Hour)
	claim := func(l *Lease, want int) BatchClaim {
		t.Helper()
		cl, ok, err := state.ClaimBatchItem(ctx, l, "w", tenant, r.ID, 0)
		if err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		if cl.Attempt != want {
			t.Fatalf("claim is attempt %d, want %d", cl.Attempt, want)
		}
		ls, err := state.BatchLeases(ctx, tenant, r.ID)
		if err != nil || ls[cl.N].Attempt != want {
			t.Fatalf("lease key %+v %v: attempt want %d", ls, err, want)
		}
		return cl
	}
	a := grantLease(t)
	cl := claim(a, 1)
	if err := state.ReleaseBatchItem(ctx, cl); err != nil {
		t.Fatal(err)
	}
	claim(a, 1) // given back: not an attempt lost
	a.Close()   // the worker vanished while playing
	b := grantLease(t)
	cl = claim(b, 2)
	ls, _ := state.BatchLeases(ctx, tenant, r.ID)
	if err := state.ExpireBatchLease(ctx, tenant, r.ID, cl.N, ls[cl.N]); err != nil { // overdue
		t.Fatal(err)
	}
	// The late worker's release must not take back an attempt it lost.
	if err := state.ReleaseBatchItem(ctx, cl); err != nil {
		t.Fatal(err)
	}
	cl = claim(b, 3)
	if err := state.ReleaseBatchItem(ctx, cl); err != nil {
		t.Fatal(err)
	}
	cl = claim(b, 3)
	if _, err := state.AckBatchItem(ctx, cl, BatchOutcome{Failed: true}); err != nil {
		t.Fatal(err)
	}
	resp, err := state.cli.Get(ctx, BatchAttemptsKey(tenant, r.ID, cl.N), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("the acknowledged item's attempt count is still there: %v %v", resp, err)
	}
}

// A claim's watch fires once the claim loses its item — the reaper ends it
// as overdue, its lease ends, the run ends — and not before.
func TestBatchClaimWatch(t *testing.T) {
	ctx := testCtx(t)
	tenant := uniq("bw")
	r := admitRun(t, tenant, 4, time.Minute, time.Hour)
	claim := func(l *Lease) BatchClaim {
		t.Helper()
		cl, ok, err := state.ClaimBatchItem(ctx, l, "w", tenant, r.ID, 0)
		if err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		return cl
	}
	open := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
			t.Fatalf("%s: the watch fired while the claim holds its item", what)
		default:
		}
	}
	closed := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the watch did not fire in 5 s", what)
		}
	}
	a := grantLease(t)
	b, err := state.GrantLease(ctx, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	overdue, ending, kept, acked := claim(a), claim(b), claim(a), claim(a)
	gOverdue, gEnding, gKept := state.WatchBatchClaim(ctx, overdue), state.WatchBatchClaim(ctx, ending), state.WatchBatchClaim(ctx, kept)
	// Another claim's acknowledgement is no loss.
	if _, err := state.AckBatchItem(ctx, acked, BatchOutcome{CPU: 1}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	open("at first", gOverdue)
	open("at first", gEnding)
	open("at first", gKept)

	ls, err := state.BatchLeases(ctx, tenant, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := state.ExpireBatchLease(ctx, tenant, r.ID, overdue.N, ls[overdue.N]); err != nil {
		t.Fatal(err)
	}
	closed("ended as overdue", gOverdue)
	b.Close()
	closed("its lease ended", gEnding)
	open("others' claims ended", gKept)
	if _, err := state.EndBatchRun(ctx, tenant, r.ID, BatchCanceled, time.Now()); err != nil {
		t.Fatal(err)
	}
	closed("the run ended", gKept)
	closed("watched once gone", state.WatchBatchClaim(ctx, kept))
}

// CPU charged for a game that was not acknowledged counts in the run's
// progress while it runs, and once it ended in its final progress and the
// tenant's settled spend, the record to be written to the backend again; a
// charge whose key is there (a try that counted, its answer lost) counts
// nothing more.
func TestBatchChargeCPU(t *testing.T) {
	ctx := testCtx(t)
	tenant := uniq("bch")
	r := admitRun(t, tenant, 3, time.Minute, time.Hour)
	l := grantLease(t)
	var cls []BatchClaim
	for range 3 {
		cl, ok, err := state.ClaimBatchItem(ctx, l, "w", tenant, r.ID, 0)
		if err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		cls = append(cls, cl)
	}
	charges := func() int64 {
		t.Helper()
		resp, err := raw.Get(ctx, BatchChargesPrefix(tenant, r.ID), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	run, p, err := state.ChargeBatchCPU(ctx, cls[0], 7)
	if err != nil || run.State != BatchRunning || p.CPU != 7 || p.Done != 0 {
		t.Fatalf("charge of a running run: %+v %+v %v", run, p, err)
	}
	if n := charges(); n != 0 {
		t.Fatalf("%d charge keys left after the charge went through", n)
	}
	if _, err := raw.Put(ctx, BatchChargeKey(cls[1]), "5"); err != nil {
		t.Fatal(err)
	}
	if _, p, err := state.ChargeBatchCPU(ctx, cls[1], 5); err != nil || p.CPU != 7 {
		t.Fatalf("a charge made already, tried again: %+v %v; want CPU 7", p, err)
	}
	if n := charges(); n != 0 {
		t.Fatalf("%d charge keys left after the second try", n)
	}

	if _, err := state.EndBatchRun(ctx, tenant, r.ID, BatchCanceled, time.Now()); err != nil {
		t.Fatal(err)
	}
	ended, err := state.BatchRun(ctx, tenant, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := state.MarkBatchRunRecorded(ctx, tenant, r.ID, ended.Rev); !ok || err != nil {
		t.Fatalf("mark recorded: %v %v", ok, err)
	}
	recorded, _ := state.BatchRun(ctx, tenant, r.ID)
	run, p, err = state.ChargeBatchCPU(ctx, cls[2], 11)
	if err != nil || run.State != BatchEnded || run.Recorded || p.CPU != 18 {
		t.Fatalf("charge of an ended run: %+v %+v %v", run, p, err)
	}
	after, _ := state.BatchRun(ctx, tenant, r.ID)
	ledger, _ := state.BatchLedger(ctx, tenant)
	if after.Final.CPU != 18 || after.Recorded || ledger.Settled != 18 {
		t.Fatalf("after a late charge: final %+v, recorded %v, settled %d; want 18, false, 18", after.Final, after.Recorded, ledger.Settled)
	}
	// The backend's record written before the charge is out of date: it
	// cannot be marked as the record.
	if ok, err := state.MarkBatchRunRecorded(ctx, tenant, r.ID, recorded.Rev); ok || err != nil {
		t.Fatalf("mark of a record read before the charge: %v %v", ok, err)
	}
	if _, err := raw.Put(ctx, BatchChargeKey(cls[0]), "7"); err != nil { // left behind
		t.Fatal(err)
	}
	if err := state.RemoveBatchRun(ctx, tenant, r.ID); err != nil {
		t.Fatal(err)
	}
	if n := charges(); n != 0 {
		t.Fatalf("%d charge keys outlive the run", n)
	}
	if _, _, err := state.ChargeBatchCPU(ctx, cls[2], 1); !errors.Is(err, ErrBatchRunNotFound) {
		t.Fatalf("charge of a removed run: %v", err)
	}
}

// answerLostKV is etcd as seen across a link that fails after a request
// went through: lose says which transactions (by the keys their Then puts)
// are applied with their answer lost, and getsFail fails every read while
// it is true.
type answerLostKV struct {
	clientv3.KV
	lose     func(puts []string) bool
	getsFail *atomic.Bool
}

var errAnswerLost = errors.New("rpc error: code = Unavailable desc = error reading from server: EOF")

func (k answerLostKV) Txn(ctx context.Context) clientv3.Txn {
	return &answerLostTxn{Txn: k.KV.Txn(ctx), kv: k}
}

func (k answerLostKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if k.getsFail.Load() {
		return nil, errAnswerLost
	}
	return k.KV.Get(ctx, key, opts...)
}

type answerLostTxn struct {
	clientv3.Txn
	kv   answerLostKV
	puts []string
}

func (t *answerLostTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.Txn = t.Txn.If(cs...); return t }
func (t *answerLostTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *answerLostTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	for _, op := range ops {
		if op.IsPut() {
			t.puts = append(t.puts, string(op.KeyBytes()))
		}
	}
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *answerLostTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	if err == nil && t.kv.lose(t.puts) {
		return nil, errAnswerLost
	}
	return resp, err
}

// A claim whose answer is lost after etcd made it is found and returned,
// fenced as usual: taken for failed, it would hold the game unplayed, bound
// to a lease that lives on, until the reaper's item timeout. Made while
// etcd stays out of reach, it is given up once the lease is lost, and the
// key goes with the lease.
func TestBatchClaimWhoseAnswerIsLost(t *testing.T) {
	ctx := testCtx(t)
	tenant := uniq("bt")
	r := admitRun(t, tenant, 2, time.Minute, time.Hour)
	cli, err := clientv3.New(clientv3.Config{Endpoints: raw.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	var lost atomic.Int32
	var outOfReach, getsFail atomic.Bool
	cli.KV = answerLostKV{KV: cli.KV, getsFail: &getsFail, lose: func(puts []string) bool {
		for _, k := range puts {
			if strings.HasPrefix(k, BatchLeasesPrefix(tenant, r.ID)) {
				lost.Add(1)
				getsFail.Store(outOfReach.Load())
				return true
			}
		}
		return false
	}}
	lossy := New(cli)

	l := grantLease(t)
	cl, ok, err := lossy.ClaimBatchItem(ctx, l, "w", tenant, r.ID, 0)
	if err != nil || !ok || lost.Load() != 1 {
		t.Fatalf("claim whose answer was lost: %+v %v %v (answers lost: %d)", cl, ok, err, lost.Load())
	}
	ls, err := state.BatchLeases(ctx, tenant, r.ID)
	if err != nil || len(ls) != 1 || ls[cl.N].raw != cl.Owner {
		t.Fatalf("leases %+v %v, want game %d's as %s", ls, err, cl.N, cl.Owner)
	}
	p, err := state.AckBatchItem(ctx, cl, BatchOutcome{CPU: 3, Ticks: 4})
	if err != nil || p.Done != 1 {
		t.Fatalf("ack of the found claim: %+v %v", p, err)
	}

	// The answer lost, and etcd out of reach from then on.
	outOfReach.Store(true)
	short, err := state.GrantLease(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	revoked := make(chan struct{})
	go func() { time.Sleep(300 * time.Millisecond); short.Close(); close(revoked) }()
	start := time.Now()
	if cl, ok, err := lossy.ClaimBatchItem(ctx, short, "w", tenant, r.ID, 0); ok || !errors.Is(err, errAnswerLost) {
		t.Fatalf("claim lost with etcd out of reach: %+v %v %v", cl, ok, err)
	}
	if lost.Load() != 2 {
		t.Fatalf("%d claims made in all, want 2", lost.Load())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the claim gave up %v after its lease was lost", d)
	}
	<-revoked
	if ls, err := state.BatchLeases(ctx, tenant, r.ID); err != nil || len(ls) != 0 {
		t.Fatalf("after the lease was lost: leases %+v %v", ls, err)
	}
}
