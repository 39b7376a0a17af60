package sqlstore

import (
	"context"
	"sync"

	"ludus.dev/ludus/backend/store"
)

// Batched device sessions (Dialect.BatchSessions, PostgreSQL).
//
// A guest login is two inserts (account, refresh token). On PostgreSQL each
// in its own transaction costs four round trips and a WAL flush; batched,
// up to maxSessionBatch concurrent logins cost one multi-row insert per
// table (plus one select for devices that already had an account) and one
// flush. sessionWorkers batches run at once: distinct devices touch
// distinct rows, so batches do not wait for each other, and one batch
// fills while another commits.
//
// Errors stay isolated: if any statement of a batch fails (a NUL byte in a
// name, a tenant that does not exist), the batch rolls back and each call
// runs again in a transaction of its own, getting its own outcome. A device
// named twice in one batch gets one account: the second insert does
// nothing and the call signs in to the account the first created. Calls
// return after the commit, so "returned nil" means durable, as before.

const (
	maxSessionBatch = 64
	sessionWorkers  = 2
)

type sessionCall struct {
	ctx     context.Context
	a       store.Account
	rename  string
	t       store.RefreshToken
	acc     store.Account
	created bool
	err     error
	done    chan struct{}
}

type sessionBatcher struct {
	s     *DB
	calls chan *sessionCall
	quit  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

func newSessionBatcher(s *DB) *sessionBatcher {
	b := &sessionBatcher{s: s, calls: make(chan *sessionCall), quit: make(chan struct{})}
	for range sessionWorkers {
		b.wg.Add(1)
		go b.run()
	}
	return b
}

func (b *sessionBatcher) stop() {
	b.once.Do(func() { close(b.quit) })
	b.wg.Wait()
}

func (b *sessionBatcher) submit(ctx context.Context, a store.Account, rename string, t store.RefreshToken) (store.Account, bool, error) {
	if err := ctx.Err(); err != nil {
		return store.Account{}, false, err
	}
	c := &sessionCall{ctx: ctx, a: a, rename: rename, t: t, done: make(chan struct{})}
	select {
	case b.calls <- c:
	case <-ctx.Done():
		return store.Account{}, false, ctx.Err()
	case <-b.quit:
		return store.Account{}, false, errClosed
	}
	<-c.done // the batch runs uncanceled; its outcome is this call's
	return c.acc, c.created, c.err
}

func (b *sessionBatcher) run() {
	defer b.wg.Done()
	for {
		var first *sessionCall
		select {
		case first = <-b.calls:
		case <-b.quit:
			return
		}
		batch := []*sessionCall{first}
	drain:
		for len(batch) < maxSessionBatch {
			select {
			case c := <-b.calls:
				batch = append(batch, c)
			default:
				break drain
			}
		}
		b.runBatch(batch)
	}
}

func (b *sessionBatcher) runBatch(batch []*sessionCall) {
	defer func() {
		for _, c := range batch {
			close(c.done)
		}
	}()
	live := batch[:0:0]
	for _, c := range batch {
		if c.err = c.ctx.Err(); c.err == nil {
			live = append(live, c)
		}
	}
	if len(live) > 1 {
		if err := b.s.tryTx(context.Background(), func(tx *tx) error { return sessionsIn(tx, live) }); err == nil {
			for _, c := range live {
				c.err = b.s.wrap("device session", c.err)
			}
			return
		}
	}
	for _, c := range live { // one call, or a batch that failed: one by one
		c.acc, c.created, c.err = b.s.deviceSessionTx(c.ctx, c.a, c.rename, c.t)
	}
}

// sessionsIn signs in every call of a batch in tx; any error fails them all
// (and they run again one by one).
func sessionsIn(tx *tx, calls []*sessionCall) error {
	ctx := context.Background()
	var args []any
	for _, c := range calls {
		a := c.a
		args = append(args, a.ID, a.TenantID, nullString(a.DeviceID), nullString(a.Email), a.PasswordHash, nullString(a.CustomID),
			a.DisplayName, ToDB(a.CreatedAt), ToDB(a.UpdatedAt))
	}
	created := map[string]bool{}
	if err := execRows(ctx, tx, `INSERT INTO accounts (`+accountCols+`)`, `ON CONFLICT DO NOTHING RETURNING id`, 9, args,
		func(r scanner) error {
			var id string
			err := r.Scan(&id)
			created[id] = true
			return err
		}); err != nil {
		return err
	}
	// Devices that had an account (or got one earlier in this batch).
	type dev struct{ tenant, device string }
	var lookups []any
	for _, c := range calls {
		if !created[c.a.ID] {
			lookups = append(lookups, c.a.TenantID, c.a.DeviceID)
		}
		c.acc, c.created, c.err = c.a, created[c.a.ID], nil
	}
	found := map[dev]store.Account{}
	for i := 0; i < len(lookups); i += 2 * rowsPerStmt {
		chunk := lookups[i:min(i+2*rowsPerStmt, len(lookups))]
		rows, err := tx.query(ctx, `SELECT `+accountCols+` FROM accounts WHERE (tenant_id, device_id) IN (VALUES `+values(len(chunk)/2, 2)+`)`, chunk...)
		if err != nil {
			return err
		}
		for rows.Next() {
			a, err := scanAccount(rows)
			if err != nil {
				rows.Close()
				return err
			}
			found[dev{a.TenantID, a.DeviceID}] = a
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	var tokens []any
	for _, c := range calls {
		if !c.created {
			acc, ok := found[dev{c.a.TenantID, c.a.DeviceID}]
			if !ok {
				// The insert conflicted on something else than the device
				// (an id collision): this call alone fails.
				c.err = store.ErrAlreadyExists
				continue
			}
			c.acc = acc
			if err := renameIn(ctx, tx, &c.acc, c.rename, c.a.UpdatedAt); err != nil {
				return err
			}
		}
		t := c.t
		tokens = append(tokens, t.Hash, t.FamilyID, c.acc.TenantID, c.acc.ID, ToDB(t.CreatedAt), ToDB(t.ExpiresAt), nil, 0)
	}
	return execRows(ctx, tx, `INSERT INTO refresh_tokens (hash, family_id, tenant_id, account_id, created_at, expires_at, used_at, revoked)`,
		``, 8, tokens, nil)
}
