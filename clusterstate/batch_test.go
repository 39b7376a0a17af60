package clusterstate

import (
	"errors"
	"sync"
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
