package main

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBenchBackendSmall runs `ludus bench backend` briefly on SQLite, in two
// rounds: every figure group runs and yields a rate in each round, and the
// figure is their median. It fails when a guard the backend puts on real
// clients (a sign-in limit, a read limit) refuses the bench's own loops, as
// a sign-in limit on the password logins (one account signed in over and
// over) once did; a second round on a fresh database must not be refused
// either.
func TestBenchBackendSmall(t *testing.T) {
	oldDur, oldWorkers, oldPostgres, oldOnly, oldRounds := bbDur, bbWorkers, bbPostgres, bbOnly, bbRounds
	t.Cleanup(func() {
		bbDur, bbWorkers, bbPostgres, bbOnly, bbRounds = oldDur, oldWorkers, oldPostgres, oldOnly, oldRounds
	})
	// A second: long enough for more password logins of one account than
	// any per-account limit allows at once.
	bbDur, bbWorkers, bbPostgres, bbOnly, bbRounds = time.Second, 2, "", "", 2
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := benchBackend(ctx, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"guest_logins_per_sec", "password_logins_per_sec", "ticket_verifications_per_sec", "match_results_per_sec"} {
		v, ok := res[k].(float64)
		if !ok || v <= 0 {
			t.Errorf("%s = %v, want a positive rate", k, res[k])
		}
		runs, _ := res["sqlite_"+k+"_runs"].([]float64)
		if len(runs) != 2 || slices.Min(runs) <= 0 {
			t.Errorf("sqlite_%s_runs = %v, want a positive rate for each of 2 rounds", k, res["sqlite_"+k+"_runs"])
			continue
		}
		if want := medianOf(runs); v != want || res["sqlite_"+k] != want {
			t.Errorf("%s = %v and its sqlite_ figure = %v, want %v, the median of its rounds %v", k, v, res["sqlite_"+k], want, runs)
		}
	}
	if res["postgres_skipped"] == nil {
		t.Error("postgres_skipped is not set, though no PostgreSQL DSN was given")
	}
}

func TestBenchBackendRefusesBadFlags(t *testing.T) {
	oldRounds, oldOnly := bbRounds, bbOnly
	t.Cleanup(func() { bbRounds, bbOnly = oldRounds, oldOnly })
	bbOnly = ""
	for _, n := range []int{0, -1, 101} {
		bbRounds = n
		if _, err := benchBackend(context.Background(), io.Discard); err == nil {
			t.Errorf("-rounds %d: no error", n)
		}
	}
	// A misspelt group would measure nothing and say nothing.
	bbRounds = 1
	for _, only := range []string{"guests", "guest,", "guest,matches", " guest"} {
		bbOnly = only
		_, err := benchBackend(context.Background(), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "guest, password, verify, match") {
			t.Errorf("-only %q: error %v, want one that names the groups", only, err)
		}
	}
}

// TestBenchBackendPostgresUnreachable: a DSN nobody answers is reported in
// postgres_skipped, and the rounds go on with SQLite alone.
func TestBenchBackendPostgresUnreachable(t *testing.T) {
	oldDur, oldWorkers, oldPostgres, oldOnly, oldRounds := bbDur, bbWorkers, bbPostgres, bbOnly, bbRounds
	t.Cleanup(func() {
		bbDur, bbWorkers, bbPostgres, bbOnly, bbRounds = oldDur, oldWorkers, oldPostgres, oldOnly, oldRounds
	})
	bbDur, bbWorkers, bbOnly, bbRounds = 200*time.Millisecond, 2, "guest", 2
	bbPostgres = "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=2"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := benchBackend(ctx, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := res["postgres_skipped"].(string); !strings.HasPrefix(s, "PostgreSQL unreachable") {
		t.Errorf("postgres_skipped = %q, want the reason PostgreSQL was not measured", res["postgres_skipped"])
	}
	if runs, _ := res["sqlite_guest_logins_per_sec_runs"].([]float64); len(runs) != 2 {
		t.Errorf("sqlite_guest_logins_per_sec_runs = %v, want 2 rounds", res["sqlite_guest_logins_per_sec_runs"])
	}
	if _, ok := res["postgres_guest_logins_per_sec"]; ok {
		t.Errorf("postgres_guest_logins_per_sec = %v, though PostgreSQL was not measured", res["postgres_guest_logins_per_sec"])
	}
}

func TestMedianOf(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{7}, 7},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{1000.04, 10, 2000.06}, 1000.04},
		{[]float64{0.77, 0.81}, 0.79},
		{[]float64{5, 5, 1, 9, 9}, 5},
	} {
		in := slices.Clone(c.in)
		if got := medianOf(in); got != c.want {
			t.Errorf("medianOf(%v) = %v, want %v", c.in, got, c.want)
		}
		if !slices.Equal(in, c.in) {
			t.Errorf("medianOf reordered its input: %v, was %v", in, c.in)
		}
	}
}

// TestBenchBackendPostgresLostInALaterRound: PostgreSQL measured in the
// first round and unreachable in the second fails the bench, rather than
// report a median of one round as if it were of all.
func TestBenchBackendPostgresLostInALaterRound(t *testing.T) {
	oldDur, oldWorkers, oldPostgres, oldOnly, oldRounds, oldRound := bbDur, bbWorkers, bbPostgres, bbOnly, bbRounds, benchPostgresRound
	t.Cleanup(func() {
		bbDur, bbWorkers, bbPostgres, bbOnly, bbRounds, benchPostgresRound = oldDur, oldWorkers, oldPostgres, oldOnly, oldRounds, oldRound
	})
	bbDur, bbWorkers, bbOnly, bbRounds, bbPostgres = 100*time.Millisecond, 1, "guest", 3, "postgres://stand-in"
	calls := 0
	benchPostgresRound = func(context.Context, io.Writer, string, bool) (map[string]any, string, error) {
		calls++
		if calls == 1 {
			return map[string]any{"guest_logins_per_sec": 100.0}, "", nil
		}
		return nil, "PostgreSQL unreachable: connection refused", nil
	}
	_, err := benchBackend(context.Background(), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "round 2") {
		t.Errorf("error %v, want one saying PostgreSQL was lost in round 2", err)
	}
	if calls != 2 {
		t.Errorf("PostgreSQL measured %d times, want 2 (the bench stops at the lost round)", calls)
	}
}
