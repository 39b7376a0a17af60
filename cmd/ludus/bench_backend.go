package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/auth"
	"ludus.dev/ludus/backend"
	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/backend/store/postgres"
	"ludus.dev/ludus/backend/store/postgres/pgdsn"
	"ludus.dev/ludus/backend/store/sqlite"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/internal/gcpolicy"
	"ludus.dev/ludus/sdk/abi"
)

var (
	bbDur      time.Duration
	bbWorkers  int
	bbPostgres string
	bbOnly     string
	bbProfile  string
	bbRounds   int
)

// bbGroups are the figure groups -only may name.
var bbGroups = []string{"guest", "password", "verify", "match"}

// bbWant reports whether figure group g (one of bbGroups) is measured:
// -only lists them, empty means all.
func bbWant(g string) bool {
	if bbOnly == "" {
		return true
	}
	return slices.Contains(strings.Split(bbOnly, ","), g)
}

func init() {
	registerBench("backend", bench{
		summary: "backend over loopback HTTP on SQLite and PostgreSQL: guest/password logins, ticket verification, match results",
		flags: func(fs *flag.FlagSet) {
			fs.DurationVar(&bbDur, "duration", 2*time.Second, "measured time per figure, store and round")
			fs.IntVar(&bbRounds, "rounds", 3, "rounds, each a fresh SQLite database and PostgreSQL schema measured one after the other; every figure is the median of its rounds")
			fs.IntVar(&bbWorkers, "workers", 2*runtime.GOMAXPROCS(0), "concurrent clients")
			fs.StringVar(&bbOnly, "only", "", "comma-separated figure groups to measure: "+strings.Join(bbGroups, ", ")+" (default all)")
			fs.StringVar(&bbProfile, "cpuprofile", "", "write a CPU profile of this process (clients, backend, driver) while it measures PostgreSQL in the first round to this file")
			fs.StringVar(&bbPostgres, "postgres", os.Getenv("LUDUS_BENCH_POSTGRES"), "PostgreSQL DSN (default $LUDUS_BENCH_POSTGRES); empty skips PostgreSQL")
		},
		run: func(ctx context.Context, progress io.Writer) (map[string]any, error) {
			return benchBackend(ctx, progress)
		},
	})
}

// benchBackend returns flat figures: "<store>_<figure>" for sqlite and
// postgres, the plain figure names for SQLite, and postgres_skipped (a
// reason) when PostgreSQL is not measured. It measures bbRounds rounds, in
// each SQLite and then PostgreSQL on a fresh database and schema, so that
// the stores are measured side by side and a burst of other work on the
// machine falls on one round of each rather than on all of one store; a
// figure is the median of its rounds, and each rate's rounds are listed in
// "<store>_<figure>_runs".
func benchBackend(ctx context.Context, progress io.Writer) (map[string]any, error) {
	if bbRounds < 1 || bbRounds > 100 {
		return nil, fmt.Errorf("want 1 <= -rounds <= 100, got %d", bbRounds)
	}
	if bbOnly != "" {
		for _, g := range strings.Split(bbOnly, ",") {
			if !slices.Contains(bbGroups, g) {
				return nil, fmt.Errorf("-only %q: no figure group %q; the groups are %s", bbOnly, g, strings.Join(bbGroups, ", "))
			}
		}
	}
	// The process stands in for a backend server, which keeps Go's garbage
	// collector settings (or those of GOGC and GOMEMLIMIT).
	gc := gcpolicy.Current()
	res := map[string]any{"workers": bbWorkers, "duration_s": bbDur.Seconds(), "rounds": bbRounds, "gomaxprocs": runtime.GOMAXPROCS(0),
		"gc_percent": gc.GCPercent, "memory_limit_bytes": gc.MemoryLimit}
	dir, err := os.MkdirTemp("", "ludus-bench-backend")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	runs := map[string][]float64{} // "<store>_<figure>" -> its value in each round
	dsn := bbPostgres
	if dsn == "" {
		res["postgres_skipped"] = "no PostgreSQL: set LUDUS_BENCH_POSTGRES or -postgres to a DSN"
	}
	for round := range bbRounds {
		fmt.Fprintf(progress, "round %d of %d\n", round+1, bbRounds)
		st, err := sqlite.Open(ctx, filepath.Join(dir, fmt.Sprintf("bench-%d.db", round)))
		if err != nil {
			return nil, err
		}
		figs, err := benchBackendStore(ctx, progress, "sqlite", st)
		st.Close()
		if err != nil {
			return nil, fmt.Errorf("sqlite: %w", err)
		}
		addRound(runs, "sqlite_", figs)
		if dsn == "" {
			continue
		}
		// The profile covers the first round's PostgreSQL part.
		figs, skipped, err := benchPostgresRound(ctx, progress, dsn, round == 0)
		if err != nil {
			return nil, err
		}
		if skipped != "" && round > 0 {
			return nil, fmt.Errorf("postgres, round %d: %s", round+1, skipped)
		}
		if skipped != "" {
			res["postgres_skipped"] = skipped
			dsn = "" // the later rounds measure SQLite alone
			continue
		}
		addRound(runs, "postgres_", figs)
	}
	for k, vs := range runs {
		name, sqliteFig := strings.CutPrefix(k, "sqlite_")
		res[k] = medianOf(vs)
		if sqliteFig {
			res[name] = res[k]
		}
		if strings.HasSuffix(k, "_per_sec") {
			res[k+"_runs"] = vs
			if sqliteFig {
				res[name+"_runs"] = vs
			}
		}
	}
	return res, nil
}

// addRound appends a round's numeric figures to runs, each under prefix.
func addRound(runs map[string][]float64, prefix string, figs map[string]any) {
	for k, v := range figs {
		switch v := v.(type) {
		case float64:
			runs[prefix+k] = append(runs[prefix+k], v)
		case int:
			runs[prefix+k] = append(runs[prefix+k], float64(v))
		}
	}
}

// medianOf is the median of vs (the mean of the middle two for an even
// count); vs is not changed. Not rounded: ratios such as
// ticket_verifications_vs_raw_ed25519 keep their digits.
func medianOf(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(vs))
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + m) / 2
	}
	return m
}

// benchPostgresRound is benchBackendPostgres; a test stands in for it.
var benchPostgresRound = benchBackendPostgres

// benchBackendPostgres measures one round on a fresh schema of dsn;
// skipped is the reason when PostgreSQL cannot be reached.
func benchBackendPostgres(ctx context.Context, progress io.Writer, dsn string, profile bool) (figs map[string]any, skipped string, err error) {
	pg, cleanup, err := benchPostgresSchema(ctx, dsn)
	if err != nil {
		return nil, "PostgreSQL unreachable: " + err.Error(), nil
	}
	defer cleanup()
	defer pg.Close()
	if profile && bbProfile != "" {
		f, err := os.Create(bbProfile)
		if err != nil {
			return nil, "", err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, "", err
		}
		defer pprof.StopCPUProfile()
	}
	figs, err = benchBackendStore(ctx, progress, "postgres", pg)
	if err != nil {
		return nil, "", fmt.Errorf("postgres: %w", err)
	}
	return figs, "", nil
}

// benchPostgresSchema opens a store in a fresh schema, dropped by cleanup.
func benchPostgresSchema(ctx context.Context, dsn string) (*postgres.Store, func(), error) {
	var b [6]byte
	rand.Read(b[:])
	schema := "bench_" + hex.EncodeToString(b[:])
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := db.ExecContext(cctx, `CREATE SCHEMA `+schema); err != nil {
		db.Close()
		return nil, nil, err
	}
	cleanup := func() {
		db.ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
		db.Close()
	}
	st, err := postgres.Open(ctx, pgdsn.WithSearchPath(dsn, schema))
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return st, cleanup, nil
}

func benchBackendStore(ctx context.Context, progress io.Writer, name string, st store.Store) (map[string]any, error) {
	srv, err := backend.New(ctx, backend.Config{
		Store:        st,
		ClusterToken: "bench-cluster-token-0123456789",
		OperatorKey:  "bench-operator-key-0123456789",
		// The bench measures how fast accounts can be created and signed in
		// (password logins sign one account in over and over): the sign-up
		// and sign-in throttles (guards against floods from one client) are
		// off here.
		SignupsPerAddress: backend.NoLimit, SignupsPerTenant: backend.NoLimit, SignInsPerAccount: backend.NoLimit,
		ValidateModule: func(context.Context, []byte) (abi.Meta, error) {
			return abi.Meta{}, errors.New("no modules in this bench")
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return nil, err
	}
	hs := httptest.NewServer(srv.Handler()) // 127.0.0.1
	defer hs.Close()
	hc := hs.Client()
	authc := ludusv1connect.NewAuthServiceClient(hc, hs.URL)
	tenantID, err := srv.EnsureTenant(ctx, "bench", "Bench")
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	var seq atomic.Int64

	if bbWant("guest") {
		fmt.Fprintf(progress, "%s: guest logins\n", name)
		out["guest_logins_per_sec"], err = benchRate(ctx, bbWorkers, bbDur, func() error {
			_, err := authc.GuestLogin(ctx, connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: "bench", DeviceId: fmt.Sprintf("bench-device-%012d", seq.Add(1))}))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("guest logins: %w", err)
		}
	}

	if bbWant("password") {
		fmt.Fprintf(progress, "%s: password logins (argon2id m=19 MiB t=2 p=1)\n", name)
		const pw = "bench password 1"
		if _, err := authc.RegisterEmail(ctx, connect.NewRequest(&ludusv1.RegisterEmailRequest{Tenant: "bench", Email: "bench@example.com", Password: pw})); err != nil {
			return nil, err
		}
		out["password_logins_per_sec"], err = benchRate(ctx, bbWorkers, bbDur, func() error {
			_, err := authc.EmailLogin(ctx, connect.NewRequest(&ludusv1.EmailLoginRequest{Tenant: "bench", Email: "bench@example.com", Password: pw}))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("password logins: %w", err)
		}
	}

	if bbWant("verify") {
		// Raw: every verification is of a distinct ticket (a cache miss: a
		// full Ed25519 verification). Tickets are issued ahead of the timing.
		fmt.Fprintf(progress, "%s: ticket verifications (one goroutine, distinct tickets)\n", name)
		var tickets []string
		issueUntil := time.Now().Add(bbDur)
		for i := 0; i < 100000 && time.Now().Before(issueUntil); i++ {
			t, _, err := srv.Issuer().Issue(auth.Claims{TenantID: tenantID, AccountID: fmt.Sprintf("a_bench%d", i)})
			if err != nil {
				return nil, err
			}
			tickets = append(tickets, t)
		}
		v := srv.Verifier()
		var nextTicket int
		out["ticket_verifications_per_sec"], err = benchRate(ctx, 1, bbDur, func() error {
			if nextTicket == len(tickets) {
				return errBenchDone
			}
			t := tickets[nextTicket]
			nextTicket++
			_, err := v.Verify(ctx, t)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("verify: %w", err)
		}
		out["ticket_verifications_distinct_tickets"] = nextTicket
		// The physical limit, same goroutine count, same run: crypto/ed25519
		// alone on one message and key, so the ticket path is always shown
		// against it (the ratio holds on a busy machine; the rate does not).
		fmt.Fprintf(progress, "%s: raw Ed25519 verifications (one goroutine)\n", name)
		pub, priv, err := ed25519.GenerateKey(nil)
		if err != nil {
			return nil, err
		}
		msg := []byte(tickets[0])
		sig := ed25519.Sign(priv, msg)
		raw, err := benchRate(ctx, 1, bbDur, func() error {
			if !ed25519.Verify(pub, msg, sig) {
				return errors.New("ed25519: a valid signature did not verify")
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("raw ed25519: %w", err)
		}
		out["raw_ed25519_verifies_per_sec"] = raw
		if raw > 0 {
			out["ticket_verifications_vs_raw_ed25519"] = out["ticket_verifications_per_sec"].(float64) / raw
		}
		// Cached: the same ticket again and again, as a gateway sees a
		// session's calls (the Verifier caches verified tickets until exp).
		fmt.Fprintf(progress, "%s: ticket verifications (one goroutine, one ticket, cached)\n", name)
		out["ticket_verifications_cached_per_sec"], err = benchRate(ctx, 1, bbDur, func() error {
			_, err := v.Verify(ctx, tickets[0])
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("verify cached: %w", err)
		}
	}

	if !bbWant("match") {
		return out, nil
	}
	fmt.Fprintf(progress, "%s: match results (2 players each, stats through a result rule, rated, exactly once)\n", name)
	// A result rule, so each result takes the path of a module's stats
	// (credited through the rule) and rates its players (places 1 and 2).
	if err := st.PutResultRules(ctx, tenantID, []store.ResultRule{{Stat: "kills", Kind: store.RuleCurrency, Target: "gems", PerUnit: 1, Cap: 10}}); err != nil {
		return nil, err
	}
	// Two accounts to report on, and matches minted ahead of the timing.
	var players []*ludusv1.PlayerResult
	for i := range 2 {
		r, err := authc.GuestLogin(ctx, connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: "bench", DeviceId: fmt.Sprintf("bench-player-%012d", i)}))
		if err != nil {
			return nil, err
		}
		players = append(players, &ludusv1.PlayerResult{AccountId: r.Msg.AccountId, Score: int64(10 + i), Xp: 100, Currency: map[string]int64{"gold": 5},
			Stats: map[string]int64{"kills": 3, "deaths": int64(i)}, Place: int32(2 - i)})
	}
	type match struct{ id, cred string }
	var matches []match
	mintUntil := time.Now().Add(bbDur)
	for i := 0; i < 20000 && time.Now().Before(mintUntil); i++ {
		id := fmt.Sprintf("bench-match-%d", i)
		cred, _, err := srv.MintMatchCredential(ctx, tenantID, id, "arena")
		if err != nil {
			return nil, err
		}
		matches = append(matches, match{id, cred})
	}
	var next atomic.Int64
	var applied atomic.Int64
	rate, err := benchRate(ctx, bbWorkers, bbDur, func() error {
		i := next.Add(1) - 1
		if i >= int64(len(matches)) {
			return errBenchDone
		}
		m := matches[i]
		ok, err := backend.NewMatchReporter(hc, hs.URL, m.id, m.cred).ReportResult(ctx, 0, players)
		if ok {
			applied.Add(1)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("match results: %w", err)
	}
	out["match_results_per_sec"] = rate
	// Exactly once: every stored result granted its 100 XP once. (A report
	// cut off by the end of the timing may be stored without the client
	// knowing, so count stored results, not acknowledged ones.)
	p, err := st.Progression(ctx, tenantID, players[0].AccountId)
	if err != nil {
		return nil, err
	}
	ended, err := st.ListMatchResults(ctx, tenantID, players[0].AccountId, math.MaxInt32)
	if err != nil {
		return nil, err
	}
	if p.XP != 100*int64(len(ended)) || p.Currency["gems"] != 3*int64(len(ended)) {
		return nil, fmt.Errorf("match results: XP %d, gems %d after %d results: not exactly once", p.XP, p.Currency["gems"], len(ended))
	}
	rs, err := st.Ratings(ctx, tenantID, "arena", []string{players[0].AccountId})
	if err != nil {
		return nil, err
	}
	if got := rs[players[0].AccountId].Matches; got != int64(len(ended)) {
		return nil, fmt.Errorf("match results: %d rated matches after %d results: not exactly once", got, len(ended))
	}
	out["match_results_applied"] = len(ended)
	return out, nil
}

var errBenchDone = errors.New("bench: out of work")

// benchRate runs op from workers goroutines for d and returns operations per
// second (rounded). The first error other than errBenchDone stops it.
func benchRate(ctx context.Context, workers int, d time.Duration, op func() error) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var n atomic.Int64
	var once sync.Once
	var firstErr error
	start := time.Now()
	var wg sync.WaitGroup
	for range max(1, workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				err := op()
				if errors.Is(err, errBenchDone) {
					cancel()
					return
				}
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					once.Do(func() { firstErr = err; cancel() })
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	el := time.Since(start).Seconds()
	return math.Round(float64(n.Load())/el*10) / 10, nil
}
