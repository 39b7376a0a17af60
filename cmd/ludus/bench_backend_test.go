package main

import (
	"context"
	"io"
	"testing"
	"time"
)

// TestBenchBackendSmall runs `ludus bench backend` briefly on SQLite: every
// figure group runs and yields a rate. It fails when a guard the backend
// puts on real clients (a sign-in limit, a read limit) refuses the bench's
// own loops, as a sign-in limit on the password logins (one account signed
// in over and over) once did.
func TestBenchBackendSmall(t *testing.T) {
	oldDur, oldWorkers, oldPostgres, oldOnly := bbDur, bbWorkers, bbPostgres, bbOnly
	t.Cleanup(func() { bbDur, bbWorkers, bbPostgres, bbOnly = oldDur, oldWorkers, oldPostgres, oldOnly })
	// A second: long enough for more password logins of one account than
	// any per-account limit allows at once.
	bbDur, bbWorkers, bbPostgres, bbOnly = time.Second, 2, "", ""
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := benchBackend(ctx, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"guest_logins_per_sec", "password_logins_per_sec", "ticket_verifications_per_sec", "match_results_per_sec"} {
		if v, ok := res[k].(float64); !ok || v <= 0 {
			t.Errorf("%s = %v, want a positive rate", k, res[k])
		}
	}
}
