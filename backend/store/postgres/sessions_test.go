package postgres

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"ludus.dev/ludus/backend/store"
)

// TestDeviceSessionStalledBatch: login batches run one at a time, but one
// whose statement stalls (here it waits for a transaction of the test that
// inserted the same device) lets the next batch start beside it: other
// devices sign in meanwhile, and the stalled one gets its outcome once the
// transaction ends.
func TestDeviceSessionStalledBatch(t *testing.T) {
	ctx := context.Background()
	s := openWithTenant(t)
	lock, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Rollback() })
	if _, err := lock.ExecContext(ctx, `INSERT INTO accounts (id, tenant_id, device_id, password_hash, display_name, created_at, updated_at)
		VALUES ('a_other', 't_g', 'dev-stall', '', 'x', 0, 0)`); err != nil {
		t.Fatal(err)
	}
	session := func(id, device string) (store.Account, bool, error) {
		return s.DeviceSession(ctx, newAccount(id, "t_g", device), "",
			store.RefreshToken{Hash: []byte("r-" + id), FamilyID: "f-" + id, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)})
	}
	type outcome struct {
		acc     store.Account
		created bool
		err     error
	}
	stalled := make(chan outcome, 1)
	go func() {
		acc, created, err := session("a_stall", "dev-stall")
		stalled <- outcome{acc, created, err}
	}()
	waitFor(t, "the login to wait for the test's transaction", func() bool {
		var n int
		s.db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE 'WITH v AS%'`).Scan(&n)
		return n > 0
	})
	for _, id := range []string{"a_1", "a_2", "a_3"} {
		done := make(chan outcome, 1)
		go func() {
			acc, created, err := session(id, "dev-"+id)
			done <- outcome{acc, created, err}
		}()
		select {
		case o := <-done:
			if o.err != nil || !o.created || o.acc.ID != id {
				t.Errorf("login of %s beside the stalled batch: %+v created %v, %v", id, o.acc, o.created, o.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("login of %s waited for the stalled batch", id)
		}
	}
	select {
	case o := <-stalled:
		t.Fatalf("the stalled login returned before the transaction it waits for ended: %+v, %v", o.acc, o.err)
	default:
	}
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	o := <-stalled
	if o.err != nil || !o.created || o.acc.ID != "a_stall" {
		t.Errorf("the stalled login: %+v created %v, %v", o.acc, o.created, o.err)
	}
}

// TestDeviceSessionSettledBeforeAlone: the calls a batch's statement
// settles return once it has run, without waiting for the calls of the
// same batch that run on their own (here a rename, waiting for a row lock
// of the test); and a call canceled while it waits for a batch returns at
// once, storing nothing.
func TestDeviceSessionSettledBeforeAlone(t *testing.T) {
	ctx := context.Background()
	s := openWithTenant(t)
	rt := func(id string) store.RefreshToken {
		return store.RefreshToken{Hash: []byte("r-" + id), FamilyID: "f-" + id, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	}
	if _, _, err := s.DeviceSession(ctx, newAccount("a_r", "t_g", "dev-r"), "", rt("a_r")); err != nil {
		t.Fatal(err)
	}
	begin := func() *sql.Tx {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback() })
		return tx
	}
	// Every worker's statement waits for stall (a device it inserts), so
	// that the next two calls are pending together, and taken in one batch
	// once stall ends.
	stall, row := begin(), begin()
	var one int
	if err := row.QueryRowContext(ctx, `SELECT 1 FROM accounts WHERE id = 'a_r' FOR UPDATE`).Scan(&one); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		acc     store.Account
		created bool
		err     error
	}
	session := func(id, device, rename string) chan outcome {
		done := make(chan outcome, 1)
		go func() {
			acc, created, err := s.DeviceSession(ctx, newAccount(id, "t_g", device), rename, rt(id))
			done <- outcome{acc, created, err}
		}()
		return done
	}
	var stalled []chan outcome
	for i := range 4 { // sqlstore's sessionWorkers
		id := fmt.Sprintf("a_s%d", i)
		if _, err := stall.ExecContext(ctx, `INSERT INTO accounts (id, tenant_id, device_id, password_hash, display_name, created_at, updated_at)
			VALUES ($1, 't_g', $2, '', 'x', 0, 0)`, "a_other"+id, "dev-"+id); err != nil {
			t.Fatal(err)
		}
		stalled = append(stalled, session(id, "dev-"+id, ""))
		waitFor(t, "the login's statement to wait for the test's transaction", func() bool {
			var n int
			s.db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
				AND wait_event_type = 'Lock' AND query LIKE 'WITH v AS%'`).Scan(&n)
			return n == i+1
		})
	}
	// A call whose context ends while it waits for a batch returns at once,
	// and nothing of it is stored.
	cctx, cancel := context.WithCancel(ctx)
	canceled := make(chan error, 1)
	go func() {
		_, _, err := s.DeviceSession(cctx, newAccount("a_c", "t_g", "dev-c"), "", rt("a_c"))
		canceled <- err
	}()
	waitFor(t, "the call to wait for a batch", func() bool { return sessionCalls() == 5 })
	cancel()
	select {
	case err := <-canceled:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("canceled call waiting for a batch: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a canceled call waited for the stalled batches")
	}
	renamed := session("a_r2", "dev-r", "renamed")
	plain := session("a_p", "dev-p", "")
	waitFor(t, "both calls to wait for a batch", func() bool { return sessionCalls() == 6 })
	if err := stall.Rollback(); err != nil {
		t.Fatal(err)
	}
	for i, c := range stalled {
		if o := <-c; o.err != nil || !o.created || o.acc.ID != fmt.Sprintf("a_s%d", i) {
			t.Errorf("stalled login %d: %+v created %v, %v", i, o.acc, o.created, o.err)
		}
	}
	select {
	case o := <-plain:
		if o.err != nil || !o.created || o.acc.ID != "a_p" {
			t.Errorf("login beside the rename: %+v created %v, %v", o.acc, o.created, o.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the login waited for the rename taken in its batch")
	}
	select {
	case o := <-renamed:
		t.Fatalf("the rename returned before the row lock it waits for was released: %+v, %v", o.acc, o.err)
	default:
	}
	if err := row.Commit(); err != nil {
		t.Fatal(err)
	}
	if o := <-renamed; o.err != nil || o.created || o.acc.ID != "a_r" || o.acc.DisplayName != "renamed" {
		t.Errorf("the rename: %+v created %v, %v", o.acc, o.created, o.err)
	}
	if _, err := s.AccountByDevice(ctx, "t_g", "dev-c"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the canceled call's device: %v, want store.ErrNotFound", err)
	}
}

// sessionCalls counts goroutines in the session batcher's submit (pending,
// or waiting for their batch).
func sessionCalls() int {
	var b bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&b, 2)
	return strings.Count(b.String(), "sqlstore.(*sessionBatcher).submit(")
}
