package postgres

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"ludus.dev/ludus/backend/store"
)

// These tests drive the group commit (sqlstore/commit.go) on PostgreSQL
// deterministically: a write waits on a row lock held by a transaction of
// the test, which holds the committer in its batch; meanwhile the calls
// under test queue up, one after the other (a committer takes queued calls
// in the order they came), and all of them form the next batch when the
// test lets the first one go.

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func newAccount(id, tenantID, device string) store.Account {
	return store.Account{ID: id, TenantID: tenantID, DeviceID: device, DisplayName: "p " + id, CreatedAt: t0, UpdatedAt: t0}
}

// submitted counts goroutines in the committer's submit (queued, or
// waiting for their batch).
func submitted() int {
	var b bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&b, 2)
	return strings.Count(b.String(), "sqlstore.(*DB).submit(")
}

// waitFor polls cond until it holds, or fails the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// holdCommitter makes the committer wait in a batch: a transaction of the
// test locks the row of account id, and a write to that row is submitted.
// release commits the test's transaction; the write then commits and its
// error is returned.
func holdCommitter(t *testing.T, s *Store, tenantID, id string) (release func() error) {
	t.Helper()
	ctx := context.Background()
	lock, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Rollback() }) // before the store closes, should the test fail
	var one int
	if err := lock.QueryRowContext(ctx, `SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE`, id).Scan(&one); err != nil {
		t.Fatal(err)
	}
	before := submitted()
	done := make(chan error, 1)
	go func() { done <- s.SetDisplayName(ctx, tenantID, id, "held", t0) }()
	waitFor(t, "the committer to wait for the row lock", func() bool {
		var n int
		s.db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE 'UPDATE accounts SET display_name%'`).Scan(&n)
		return n > 0 && submitted() > before
	})
	return func() error {
		if err := lock.Commit(); err != nil {
			t.Fatal(err)
		}
		return <-done
	}
}

// queue starts fn in a goroutine once the previous ones are queued, so
// they reach the committer in this order.
type queue struct {
	t  *testing.T
	n  int
	wg sync.WaitGroup
}

func (q *queue) add(fn func()) {
	q.t.Helper()
	want := submitted() + 1
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		fn()
	}()
	waitFor(q.t, fmt.Sprintf("call %d to queue", q.n), func() bool { return submitted() >= want })
	q.n++
}

// txidLog records, for each account inserted, the transaction that
// inserted it (txid_current() is the top-level transaction's, savepoint or
// not).
func txidLog(t *testing.T, s *Store) {
	t.Helper()
	for _, stmt := range []string{
		`CREATE TABLE inserted_by (account_id TEXT PRIMARY KEY, txid BIGINT NOT NULL)`,
		`CREATE FUNCTION log_txid() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN INSERT INTO inserted_by VALUES (NEW.id, txid_current()); RETURN NEW; END $$`,
		`CREATE TRIGGER log_txid AFTER INSERT ON accounts FOR EACH ROW EXECUTE FUNCTION log_txid()`,
	} {
		if _, err := s.db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGroupCommitIsolatesFailures: in one batch, calls that fail (a unique
// violation, which on PostgreSQL aborts the transaction; a failure after
// statements that succeeded; an update of nothing) get their own error,
// leave nothing behind, and the others commit, together.
func TestGroupCommitIsolatesFailures(t *testing.T) {
	ctx := context.Background()
	s := openFresh(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.CreateTenant(ctx, store.Tenant{ID: "t_g", Slug: "g", Name: "G", CreatedAt: t0},
		store.APIKey{ID: "k_taken", TenantID: "t_g", Hash: []byte("taken key"), Scope: "admin", CreatedAt: t0}))
	must(s.CreateAccount(ctx, newAccount("a_hold", "t_g", "dev-hold")))
	must(s.CreateAccount(ctx, newAccount("a_taken", "t_g", "dev-taken")))
	txidLog(t, s)

	release := holdCommitter(t, s, "t_g", "a_hold")
	q := &queue{t: t}
	errs := make([]error, 8)
	create := func(i int, device string) {
		q.add(func() { errs[i] = s.CreateAccount(ctx, newAccount(fmt.Sprintf("a_%d", i), "t_g", device)) })
	}
	create(0, "dev-0")
	create(1, "dev-taken") // unique violation: the first attempt rolls back and the batch runs again without it
	create(2, "dev-2")
	// A unique violation after a statement that succeeded, in a savepoint.
	q.add(func() {
		errs[3] = s.CreateTenant(ctx, store.Tenant{ID: "t_3", Slug: "three", Name: "3", CreatedAt: t0},
			store.APIKey{ID: "k_3", TenantID: "t_3", Hash: []byte("taken key"), Scope: "admin", CreatedAt: t0})
	})
	create(4, "dev-4")
	q.add(func() { errs[5] = s.SetDisplayName(ctx, "t_g", "a_nobody", "x", t0) }) // updates nothing
	create(6, "dev-6")
	create(7, "dev-6") // the device a call before it in the batch took
	if err := release(); err != nil {
		t.Fatalf("the held write: %v", err)
	}
	q.wg.Wait()

	for i, err := range errs {
		switch i {
		case 1, 3, 7:
			if !errors.Is(err, store.ErrAlreadyExists) {
				t.Errorf("call %d: %v, want ErrAlreadyExists", i, err)
			}
		case 5:
			if !errors.Is(err, store.ErrNotFound) {
				t.Errorf("call %d: %v, want ErrNotFound", i, err)
			}
		default:
			if err != nil {
				t.Errorf("call %d: %v", i, err)
			}
		}
	}
	if _, err := s.TenantByID(ctx, "t_3"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the tenant of the failed call 3 was stored: %v", err)
	}
	if _, err := s.AccountByID(ctx, "t_g", "a_7"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the account of the failed call 7 was stored: %v", err)
	}
	// The accounts of the calls that succeeded: one transaction.
	rows, err := s.db.QueryContext(ctx, `SELECT account_id, txid FROM inserted_by ORDER BY account_id`)
	must(err)
	defer rows.Close()
	txids := map[string]int64{}
	for rows.Next() {
		var id string
		var txid int64
		must(rows.Scan(&id, &txid))
		txids[id] = txid
	}
	must(rows.Err())
	if len(txids) != 4 || txids["a_0"] == 0 || txids["a_0"] != txids["a_2"] || txids["a_0"] != txids["a_4"] || txids["a_0"] != txids["a_6"] {
		t.Errorf("inserted accounts and their transactions: %v; want a_0, a_2, a_4, a_6 in one", txids)
	}
}

// TestGroupCommitFailedCommit: when a batch's commit fails (here a deferred
// constraint that one call's row breaks), every call of the batch gets the
// error and nothing of the batch is stored; the next batch commits.
func TestGroupCommitFailedCommit(t *testing.T) {
	ctx := context.Background()
	s := openWithTenant(t)
	if err := s.CreateAccount(ctx, newAccount("a_hold", "t_g", "dev-hold")); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN IF NEW.display_name = 'poison' THEN RAISE EXCEPTION 'poisoned batch'; END IF; RETURN NULL; END $$`,
		`CREATE CONSTRAINT TRIGGER refuse_poison AFTER INSERT ON accounts DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW EXECUTE FUNCTION refuse_poison()`,
	} {
		if _, err := s.db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	release := holdCommitter(t, s, "t_g", "a_hold")
	q := &queue{t: t}
	errs := make([]error, 5)
	for i := range errs {
		a := newAccount(fmt.Sprintf("a_%d", i), "t_g", fmt.Sprintf("dev-%d", i))
		if i == 2 {
			a.DisplayName = "poison"
		}
		q.add(func() { errs[i] = s.CreateAccount(ctx, a) })
	}
	if err := release(); err != nil {
		t.Fatalf("the held write: %v", err)
	}
	q.wg.Wait()
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "poisoned batch") {
			t.Errorf("call %d: %v, want the commit's error", i, err)
		}
		if _, err := s.AccountByID(ctx, "t_g", fmt.Sprintf("a_%d", i)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("account of call %d stored: %v", i, err)
		}
	}
	if err := s.CreateAccount(ctx, newAccount("a_after", "t_g", "dev-after")); err != nil {
		t.Errorf("a write after the failed batch: %v", err)
	}
}

// TestGroupCommitRetriesDeadlock: a call whose statement PostgreSQL picks
// as a deadlock's victim runs again in the next batch, after the batch's
// locks are gone, and succeeds; its caller never sees the deadlock.
func TestGroupCommitRetriesDeadlock(t *testing.T) {
	ctx := context.Background()
	s := openFresh(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.CreateTenant(ctx, store.Tenant{ID: "t_g", Slug: "g", Name: "G", CreatedAt: t0}))
	for _, id := range []string{"a_1", "a_2"} {
		must(s.CreateAccount(ctx, newAccount(id, "t_g", "dev-"+id)))
		if _, err := s.ApplyChange(ctx, store.Change{TenantID: "t_g", AccountID: id, Key: "seed", XP: 1, At: t0}); err != nil {
			t.Fatal(err)
		}
	}
	must(s.CreateMatch(ctx, store.Match{TenantID: "t_g", ID: "m_1", Game: "arena", CredentialHash: []byte("c"), CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}))

	// The test's transaction takes a_2's progression row, the report then
	// takes a_1's (players are locked in account order) and waits for
	// a_2's, and the test's transaction asks for a_1's: a deadlock, which
	// the committer's server process (deadlock_timeout 1 s, the test's
	// raised) finds and fails.
	other, err := s.db.Conn(ctx)
	must(err)
	defer other.Close()
	if _, err := other.ExecContext(ctx, `SET deadlock_timeout = '20s'`); err != nil {
		t.Skipf("cannot raise deadlock_timeout (needs a superuser): %v", err)
	}
	otx, err := other.BeginTx(ctx, nil)
	must(err)
	defer otx.Rollback()
	_, err = otx.ExecContext(ctx, `UPDATE progression SET xp = xp + 10 WHERE account_id = 'a_2'`)
	must(err)
	type result struct {
		applied bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		applied, err := s.ApplyMatchReport(ctx, store.MatchReport{TenantID: "t_g", MatchID: "m_1", Final: true, At: t0,
			Players: []store.PlayerReport{{AccountID: "a_1", XP: 100}, {AccountID: "a_2", XP: 100}}})
		done <- result{applied, err}
	}()
	waitFor(t, "the report to wait for a_2's row", func() bool {
		var n int
		s.db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE '%progression%'`).Scan(&n)
		return n > 0
	})
	_, err = otx.ExecContext(ctx, `UPDATE progression SET xp = xp + 10 WHERE account_id = 'a_1'`)
	must(err) // the report was the victim: its locks are gone
	must(otx.Commit())
	r := <-done
	if r.err != nil || !r.applied {
		t.Fatalf("report after a deadlock: applied %v, %v", r.applied, r.err)
	}
	for _, id := range []string{"a_1", "a_2"} {
		p, err := s.Progression(ctx, "t_g", id)
		must(err)
		if p.XP != 1+10+100 {
			t.Errorf("%s: XP %d, want 111 (seed, the test's 10, the report's 100 once)", id, p.XP)
		}
	}
}

// TestGroupCommitCallerGone: a call whose context ends while its batch runs
// waits for the batch and reports the real outcome (its write committed);
// one whose context ends while it waits in a batch for its turn is never
// run.
func TestGroupCommitCallerGone(t *testing.T) {
	ctx := context.Background()
	s := openWithTenant(t)
	for _, id := range []string{"a_1", "a_2"} {
		if err := s.CreateAccount(ctx, newAccount(id, "t_g", "dev-"+id)); err != nil {
			t.Fatal(err)
		}
	}
	// lock takes an account's row in a transaction of the test.
	lock := func(id string) *sql.Tx {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback() })
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE`, id).Scan(&one); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	waitingWrites := func() int {
		var n int
		s.db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE 'UPDATE accounts SET display_name%'`).Scan(&n)
		return n
	}
	lock1, lock2 := lock("a_1"), lock("a_2")
	// Batch 1: a rename of a_1, which waits for lock1.
	ctx1, cancel1 := context.WithCancel(ctx)
	first := make(chan error, 1)
	go func() { first <- s.SetDisplayName(ctx1, "t_g", "a_1", "one", t0) }()
	waitFor(t, "the first rename to wait for its row", func() bool { return waitingWrites() == 1 })
	// Batch 2, queued: a rename of a_2 (it will wait for lock2), then an
	// account whose caller gives up.
	q := &queue{t: t}
	second := make(chan error, 1)
	q.add(func() { second <- s.SetDisplayName(ctx, "t_g", "a_2", "two", t0) })
	ctx3, cancel3 := context.WithCancel(ctx)
	third := make(chan error, 1)
	q.add(func() { third <- s.CreateAccount(ctx3, newAccount("a_3", "t_g", "dev-a_3")) })

	cancel1()
	select {
	case err := <-first:
		t.Fatalf("the first call returned before its batch ended: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := lock1.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Errorf("first call, canceled while it ran: %v, want its outcome (stored)", err)
	}
	waitFor(t, "the second rename to wait for its row", func() bool { return waitingWrites() == 1 })
	cancel3()
	if err := <-third; !errors.Is(err, context.Canceled) {
		t.Errorf("third call, canceled before its turn: %v", err)
	}
	if err := lock2.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Errorf("second call: %v", err)
	}
	for id, want := range map[string]string{"a_1": "one", "a_2": "two"} {
		if a, err := s.AccountByID(ctx, "t_g", id); err != nil || a.DisplayName != want {
			t.Errorf("%s: %+v, %v; want renamed %q", id, a, err, want)
		}
	}
	if _, err := s.AccountByID(ctx, "t_g", "a_3"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the third call ran after its caller gave up: %v", err)
	}
}

// TestDeviceSessionBatchRenames: concurrent logins of known and new
// devices, some renaming (batches leave those to a transaction of their
// own): each call gets its account with the name it asked for, the rename
// is stored, and each refresh token belongs to the call's account.
func TestDeviceSessionBatchRenames(t *testing.T) {
	ctx := context.Background()
	s := openWithTenant(t)
	const n = 24
	for i := 0; i < n; i += 2 {
		if err := s.CreateAccount(ctx, newAccount(fmt.Sprintf("a_known%d", i), "t_g", fmt.Sprintf("dev-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 3 {
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rename := ""
				if i%4 == 0 {
					rename = fmt.Sprintf("name %d/%d", i, round)
				}
				a := newAccount(fmt.Sprintf("a_%d_%d", round, i), "t_g", fmt.Sprintf("dev-%d", i))
				a.UpdatedAt = t0.Add(time.Duration(round+1) * time.Second)
				tok := store.RefreshToken{Hash: []byte(fmt.Sprintf("r-%d-%d", round, i)), FamilyID: "f", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
				acc, created, err := s.DeviceSession(ctx, a, rename, tok)
				wantID := a.ID
				switch {
				case i%2 == 0:
					wantID = fmt.Sprintf("a_known%d", i)
				case round > 0:
					wantID = fmt.Sprintf("a_0_%d", i)
				}
				if err != nil || acc.ID != wantID || created != (wantID == a.ID) {
					t.Errorf("round %d call %d: %+v created %v, %v; want account %s", round, i, acc, created, err, wantID)
					return
				}
				if rename != "" && (acc.DisplayName != rename || !acc.UpdatedAt.Equal(a.UpdatedAt)) {
					t.Errorf("round %d call %d: %+v, want renamed %q at %v", round, i, acc, rename, a.UpdatedAt)
				}
				if rename == "" && i%2 == 0 && (acc.DisplayName == "" || acc.UpdatedAt.After(a.UpdatedAt)) {
					t.Errorf("round %d call %d: %+v", round, i, acc)
				}
				stored, err := s.AccountByID(ctx, "t_g", wantID)
				if err != nil || stored.DisplayName != acc.DisplayName {
					t.Errorf("round %d call %d: stored %+v, %v; returned %q", round, i, stored, err, acc.DisplayName)
				}
				var owner string
				if err := s.db.QueryRowContext(ctx, `SELECT account_id FROM refresh_tokens WHERE hash = $1`, tok.Hash).Scan(&owner); err != nil || owner != wantID {
					t.Errorf("round %d call %d: token of %q, %v", round, i, owner, err)
				}
			}()
		}
		wg.Wait()
	}
	var accounts int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM accounts`).Scan(&accounts); err != nil || accounts != n {
		t.Errorf("%d accounts, %v; want %d", accounts, err, n)
	}
}
