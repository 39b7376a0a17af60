package storetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"ludus.dev/ludus/backend/store"
)

// Cases for webhook deliveries.

func testWebhooks(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn, other := mustTenant(t, s, "wh"), mustTenant(t, s, "wh2")
	_, err := s.Webhook(ctx, tn.ID)
	wantErr(t, "no webhook", err, store.ErrNotFound)
	must(t, "put", s.PutWebhook(ctx, store.Webhook{TenantID: tn.ID, URL: "https://example.com/h?a='1'", Secret: []byte("s3cret")}))
	w, err := s.Webhook(ctx, tn.ID)
	must(t, "get", err)
	if w.URL != "https://example.com/h?a='1'" || string(w.Secret) != "s3cret" {
		t.Fatalf("webhook = %+v", w)
	}
	_, err = s.Webhook(ctx, other.ID)
	wantErr(t, "other tenant's webhook", err, store.ErrNotFound)

	a := mustAccount(t, s, tn.ID, "dev-wh-000000000")
	for i := range 3 {
		mid := fmt.Sprint("whm", i)
		mustMatch(t, s, tn.ID, mid, "arena")
		_, err := s.ApplyMatchReport(ctx, store.MatchReport{TenantID: tn.ID, MatchID: mid, Final: true, At: base,
			Players: []store.PlayerReport{{AccountID: a.ID, Score: 1}},
			Webhook: &store.WebhookDelivery{ID: "d" + mid, TenantID: tn.ID, Event: "match.result", Payload: []byte(mid),
				NextAt: base.Add(time.Duration(i) * time.Second), CreatedAt: base.Add(time.Duration(i) * time.Second), UpdatedAt: base}})
		must(t, "final", err)
	}
	due, err := s.DueDeliveries(ctx, base.Add(time.Second), base.Add(time.Minute), 10)
	must(t, "due", err)
	if len(due) != 2 || due[0].ID != "dwhm0" || string(due[0].Payload) != "whm0" {
		t.Fatalf("due = %+v", due)
	}
	// Leased: not due again until the lease ends.
	if again, _ := s.DueDeliveries(ctx, base.Add(2*time.Second), base.Add(time.Minute), 10); len(again) != 1 || again[0].ID != "dwhm2" {
		t.Fatalf("due during lease = %+v", again)
	}
	d := due[0]
	d.State, d.Attempts, d.UpdatedAt = store.DeliveryDelivered, 1, base.Add(3*time.Second)
	must(t, "update", s.UpdateDelivery(ctx, d))
	d = due[1]
	d.Attempts, d.LastError, d.NextAt = 1, "HTTP 500", base.Add(5*time.Second)
	must(t, "update", s.UpdateDelivery(ctx, d))
	after, _ := s.DueDeliveries(ctx, base.Add(2*time.Hour), base.Add(3*time.Hour), 10)
	if len(after) != 2 {
		t.Fatalf("due after lease = %+v", after)
	}
	ds, _ := s.ListDeliveries(ctx, tn.ID, 10)
	if len(ds) != 3 || ds[2].State != store.DeliveryDelivered || ds[1].LastError != "HTTP 500" {
		t.Fatalf("deliveries = %+v", ds)
	}
	if ds, _ := s.ListDeliveries(ctx, other.ID, 10); len(ds) != 0 {
		t.Fatalf("other tenant sees deliveries %+v", ds)
	}
	must(t, "remove webhook", s.PutWebhook(ctx, store.Webhook{TenantID: tn.ID}))
	_, err = s.Webhook(ctx, tn.ID)
	wantErr(t, "removed webhook", err, store.ErrNotFound)
}

// testWebhookDeliveryRetention: DeleteFinishedDeliveries deletes the
// delivered and failed deliveries whose last attempt was before its time,
// up to its limit, and never a pending one.
func testWebhookDeliveryRetention(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "whr")
	a := mustAccount(t, s, tn.ID, "dev-whr-00000000")
	// d0 delivered at base+1m, d1 failed at base+2m, d2 pending (its
	// last attempt at base+1m), d3 delivered at base+10m.
	finish := []struct {
		state string
		at    time.Duration
	}{{store.DeliveryDelivered, time.Minute}, {store.DeliveryFailed, 2 * time.Minute}, {store.DeliveryPending, time.Minute}, {store.DeliveryDelivered, 10 * time.Minute}}
	for i, f := range finish {
		mid := fmt.Sprint("whr", i)
		mustMatch(t, s, tn.ID, mid, "arena")
		d := store.WebhookDelivery{ID: fmt.Sprint("d", i), TenantID: tn.ID, Event: "match.result", Payload: []byte(mid),
			NextAt: base, CreatedAt: base, UpdatedAt: base}
		_, err := s.ApplyMatchReport(ctx, store.MatchReport{TenantID: tn.ID, MatchID: mid, Final: true, At: base,
			Players: []store.PlayerReport{{AccountID: a.ID, Score: 1}}, Webhook: &d})
		must(t, "final", err)
		// As the backend records an attempt: next_at stays the time the
		// attempt was due (a retry's is later, and still pending).
		d.State, d.Attempts, d.UpdatedAt = f.state, 1, base.Add(f.at)
		if f.state == store.DeliveryPending {
			d.NextAt = base.Add(f.at + time.Hour)
		}
		must(t, "update", s.UpdateDelivery(ctx, d))
	}
	ids := func() string {
		t.Helper()
		ds, err := s.ListDeliveries(ctx, tn.ID, 10)
		must(t, "list", err)
		var out []string
		for _, d := range ds {
			out = append(out, d.ID)
		}
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	del := func(before time.Duration, limit, want int) {
		t.Helper()
		n, err := s.DeleteFinishedDeliveries(ctx, base.Add(before), limit)
		if err != nil || n != want {
			t.Fatalf("DeleteFinishedDeliveries(base+%v, %d) = %d, %v; want %d", before, limit, n, err, want)
		}
	}
	del(time.Minute, 10, 0) // d0's attempt was at base+1m: not before it
	del(5*time.Minute, 1, 1)
	del(5*time.Minute, 10, 1)
	if got := ids(); got != "d2 d3" {
		t.Fatalf("deliveries left after deleting those finished before base+5m: %s, want d2 d3", got)
	}
	del(24*time.Hour, 10, 1)
	if got := ids(); got != "d2" {
		t.Fatalf("deliveries left: %s, want the pending d2", got)
	}
}
