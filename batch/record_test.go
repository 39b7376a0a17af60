package batch

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"ludus.dev/ludus/backend"
	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/clusterstate"
)

// heldRecords is a backend whose first write of a run's record waits until
// released, as a slow writer's would.
type heldRecords struct {
	*backend.Server
	writing, release chan struct{}
}

func (b *heldRecords) PutBatchRun(ctx context.Context, r store.BatchRun) error {
	if b.writing != nil {
		close(b.writing)
		b.writing = nil
		<-b.release
	}
	return b.Server.PutBatchRun(ctx, r)
}

// Two writers record an ended run while a late charge changes it: the one
// whose write of the older record lands last writes again, so the backend
// ends with the record as it is.
func TestRecordRunWritesTheLastRecord(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	tenant, _ := newTenant(t)
	adm := &Admitter{Etcd: state, Backend: srv, Engine: eng}
	run, err := adm.Admit(ctx, tenant, Spec{Module: "arena", Games: 1, Maps: []Map{{Config: json.RawMessage(shortArena)}}, Budget: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := state.EndBatchRun(ctx, tenant, run.ID, clusterstate.BatchCanceled, time.Now()); err != nil {
		t.Fatal(err)
	}
	slow := &heldRecords{Server: srv, writing: make(chan struct{}), release: make(chan struct{})}
	writing := slow.writing
	first := make(chan error, 1)
	go func() { first <- recordRun(ctx, state, slow, tenant, run.ID) }()
	<-writing // it read the record without the charge, and writes it
	if _, _, err := state.ChargeBatchCPU(ctx, clusterstate.BatchClaim{Tenant: tenant, Run: run.ID, N: 0, Fence: 1}, 5e6); err != nil {
		t.Fatal(err)
	}
	if err := recordRun(ctx, state, srv, tenant, run.ID); err != nil {
		t.Fatal(err)
	}
	close(slow.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	r, _ := state.BatchRun(ctx, tenant, run.ID)
	rec, err := srv.BatchRun(ctx, tenant, run.ID)
	if err != nil || rec.CPUNanos != 5e6 || r.Final.CPU != 5e6 || !r.Recorded {
		t.Fatalf("backend record CPU %d (%v), etcd %d recorded %v; want 5 ms, recorded", rec.CPUNanos, err, r.Final.CPU, r.Recorded)
	}
}
