package sqlstore_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"modernc.org/sqlite"

	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/backend/store/postgres"
	"ludus.dev/ludus/backend/store/postgres/pgtest"
	ludussqlite "ludus.dev/ludus/backend/store/sqlite"
	"ludus.dev/ludus/backend/store/sqlstore"
)

// Reads of many matches take a fixed number of queries, not one per match
// (N+1): ListMatchResults and what an export reads, on SQLite and (with
// LUDUS_TEST_POSTGRES) PostgreSQL, counted at the driver.

func TestMatchReadsQueryCount(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "ludus.db")
		st, err := ludussqlite.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		testMatchReadsQueryCount(t, st, &sqlite.Driver{}, path, sqlstore.Dialect{Name: "sqlite"})
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := pgtest.FreshSchema(t)
		st, err := postgres.Open(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		testMatchReadsQueryCount(t, st, stdlib.GetDefaultDriver(), dsn, sqlstore.Dialect{Name: "postgres", Dollar: true})
	})
}

// testMatchReadsQueryCount fills st with 40 results, then reads them
// through a second store on the same database whose connections count
// their queries.
func testMatchReadsQueryCount(t *testing.T, st store.Store, drv driver.Driver, dsn string, d sqlstore.Dialect) {
	ctx := context.Background()
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tn := store.Tenant{ID: "t_count", Slug: "count", Name: "Count", CreatedAt: base}
	must(t, st.CreateTenant(ctx, tn))
	var ids []string
	for i := range 3 {
		a := store.Account{ID: fmt.Sprint("a_count", i), TenantID: tn.ID, DeviceID: fmt.Sprintf("dev-count-%07d", i), CreatedAt: base, UpdatedAt: base}
		must(t, st.CreateAccount(ctx, a))
		ids = append(ids, a.ID)
	}
	const matches = 40
	for i := range matches {
		mid := fmt.Sprint("m", i)
		must(t, st.CreateMatch(ctx, store.Match{TenantID: tn.ID, ID: mid, Game: "arena", CredentialHash: []byte(mid), CreatedAt: base, ExpiresAt: base.Add(time.Hour)}))
		must(t, st.AddMatchPlayers(ctx, tn.ID, mid, ids, base))
		var ps []store.PlayerReport
		for _, id := range ids {
			ps = append(ps, store.PlayerReport{AccountID: id, Score: int64(i), Currency: map[string]int64{"gold": 1}})
		}
		_, err := st.ApplyMatchReport(ctx, store.MatchReport{TenantID: tn.ID, MatchID: mid, Final: true, At: base.Add(time.Duration(i) * time.Second), Players: ps})
		must(t, err)
	}

	var queries atomic.Int64
	db := sql.OpenDB(countingConnector{drv: drv, dsn: dsn, queries: &queries})
	defer db.Close()
	r := sqlstore.New(db, db, d)
	count := func(what string, max int64, f func() error) {
		t.Helper()
		queries.Store(0)
		must(t, f())
		if n := queries.Load(); n > max {
			t.Errorf("%s took %d queries, want at most %d", what, n, max)
		}
	}
	count("ListMatchResults of the tenant", 1, func() error {
		rs, err := r.ListMatchResults(ctx, tn.ID, "", 100)
		if err == nil && (len(rs) != matches || len(rs[0].Players) != len(ids)) {
			err = fmt.Errorf("%d results, the first with %d players", len(rs), len(rs[0].Players))
		}
		return err
	})
	count("ListMatchResults of an account", 1, func() error {
		rs, err := r.ListMatchResults(ctx, tn.ID, ids[0], 100)
		if err == nil && (len(rs) != matches || len(rs[matches-1].Players) != len(ids)) {
			err = fmt.Errorf("%d results", len(rs))
		}
		return err
	})
	count("EachAccountMatch", 1, func() error {
		n := 0
		err := r.EachAccountMatch(ctx, tn.ID, ids[0], func(store.AccountMatch) error { n++; return nil })
		if err == nil && n != matches {
			err = fmt.Errorf("%d matches", n)
		}
		return err
	})
	// The other reads of an export, one query each whatever they find.
	for what, read := range map[string]func() error{
		"EachAppliedChange": func() error {
			return r.EachAppliedChange(ctx, tn.ID, ids[0], func(store.AppliedChange) error { return nil })
		},
		"EachAccountBoard": func() error {
			return r.EachAccountBoard(ctx, tn.ID, ids[0], func(store.AccountBoard) error { return nil })
		},
		"EachAccountRating": func() error {
			return r.EachAccountRating(ctx, tn.ID, ids[0], func(store.Rating) error { return nil })
		},
		"EachAccountSession": func() error {
			return r.EachAccountSession(ctx, tn.ID, ids[0], func(store.AccountSession) error { return nil })
		},
		"EachUnfinishedAccountMatch": func() error {
			return r.EachUnfinishedAccountMatch(ctx, tn.ID, ids[0], func(store.AccountMatch) error { return nil })
		},
	} {
		count(what, 1, read)
	}
	count("EachAccountRosterEntry", 1, func() error {
		n := 0
		err := r.EachAccountRosterEntry(ctx, tn.ID, ids[0], func(store.RosterEntry) error { n++; return nil })
		if err == nil && n != matches {
			err = fmt.Errorf("%d roster entries", n)
		}
		return err
	})
	count("EachLedgerEntry", 1, func() error {
		n := 0
		err := r.EachLedgerEntry(ctx, tn.ID, ids[0], func(store.LedgerEntry) error { n++; return nil })
		if err == nil && n != matches {
			err = fmt.Errorf("%d ledger entries", n)
		}
		return err
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// countingConnector opens connections of drv that count the queries run
// on them (directly or through prepared statements).
type countingConnector struct {
	drv     driver.Driver
	dsn     string
	queries *atomic.Int64
}

func (c countingConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.drv.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: conn, queries: c.queries}, nil
}

func (c countingConnector) Driver() driver.Driver { return c.drv }

type countingConn struct {
	driver.Conn
	queries *atomic.Int64
}

func (c countingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	c.queries.Add(1)
	return q.QueryContext(ctx, query, args)
}

func (c countingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	var st driver.Stmt
	var err error
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		st, err = p.PrepareContext(ctx, query)
	} else {
		st, err = c.Conn.Prepare(query)
	}
	if err != nil {
		return nil, err
	}
	return countingStmt{Stmt: st, queries: c.queries}, nil
}

type countingStmt struct {
	driver.Stmt
	queries *atomic.Int64
}

func (s countingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.queries.Add(1)
	if q, ok := s.Stmt.(driver.StmtQueryContext); ok {
		return q.QueryContext(ctx, args)
	}
	vals := make([]driver.Value, len(args))
	for i, a := range args {
		vals[i] = a.Value
	}
	return s.Stmt.Query(vals) //nolint:staticcheck // drivers without contexts
}
