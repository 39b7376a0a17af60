package postgres

import (
	"context"
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
