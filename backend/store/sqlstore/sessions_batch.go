package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"ludus.dev/ludus/backend/store"
)

// Batched device sessions (Dialect.BatchSessions, PostgreSQL).
//
// A guest login is two inserts (account, refresh token). On PostgreSQL each
// in its own transaction costs four round trips and a WAL flush; batched,
// up to maxSessionBatch concurrent logins are one statement (INSERT and
// UPDATE in WITH clauses, run outside a transaction: it commits by itself),
// so one round trip and one flush (a lone login too). Batches run apart
// from the group commit (distinct devices touch distinct rows), one at a
// time: while one runs, the next fills, so that concurrent logins share
// statements, round trips and flushes. A batch whose statement has run
// for its overlap (three typical statements, 1 to 10 ms: a slow flush, a
// lock wait) lets the next one start,
// up to sessionWorkers at once, so one stalled statement does not hold up
// every login of the process. With sessionWorkers batches always free to
// start at once, the bench's four callers each ran a batch of their own
// on the 2-core dev machine, about 230 µs of PostgreSQL CPU per login; one
// at a time, batches hold about two, 140 µs, and the logins/s went up by
// a sixth. A single batcher without the bound ran once at 618 logins/s
// (docs/RATIONALE.md). The worker whose statement has run keeps the turn
// and gathers the next batch itself (no hand-off to another goroutine
// between two statements); calls wait in a list (pending) rather than on
// a channel send, so a caller does not wake when its call is taken.
//
// Errors stay isolated: if the statement fails (a NUL byte in a name, a
// tenant that does not exist), nothing of it is stored and each call runs
// again on its own (deviceSessionTx, through the group commit), getting its
// own outcome. So do the calls the statement does not settle: a device or
// account id named twice in the batch, a rename, a device whose account
// another transaction created after the statement's snapshot, an id that
// collides with another device's account. The calls the statement
// settles return as soon as it has committed, without waiting for those of
// the batch that run on their own.
// Calls return after the commit, so "returned nil" means durable, as before.

const (
	maxSessionBatch = 64
	sessionWorkers  = 4
	// A batch's statement that runs for sessionOverlapFactor times the
	// typical statement (an average of the recent ones), and at least
	// minSessionOverlap, lets the next batch start beside it; never later
	// than maxSessionOverlap. A fixed 1 ms let a cascade start: once one
	// slow statement let a second batch start, the two slowed each other
	// past 1 ms, each let the next one start too, batches shrank to one
	// login and the logins/s halved until the load fell. Measured against
	// the typical statement, slower statements make the overlap longer,
	// fewer batches run at once, and the statements get fast again.
	sessionOverlapFactor = 3
	minSessionOverlap    = time.Millisecond
	maxSessionOverlap    = 10 * time.Millisecond
	// sessionBatchTimeout bounds a batch's statement, which runs for
	// several callers whatever their contexts.
	sessionBatchTimeout = 30 * time.Second
)

type sessionCall struct {
	ctx     context.Context
	a       store.Account
	rename  string
	t       store.RefreshToken
	acc     store.Account
	created bool
	err     error
	alone   bool // runs on its own, not in the batch's statement
	done    chan struct{}
}

type sessionBatcher struct {
	s *DB
	// mu guards pending, the calls no batch has taken yet, and closed.
	mu      sync.Mutex
	pending []*sessionCall
	closed  bool
	// wake tells the worker that gathers the next batch that a call is
	// pending (capacity 1).
	wake chan struct{}
	// turn is held by the worker that gathers the next batch, then by its
	// statement, for up to overlap().
	turn chan struct{}
	quit chan struct{}
	// typical is an average of the recent statements' durations
	// (nanoseconds), each counted as at most maxSessionOverlap.
	typical atomic.Int64
	wg      sync.WaitGroup
	once    sync.Once
}

func newSessionBatcher(s *DB) *sessionBatcher {
	b := &sessionBatcher{s: s, wake: make(chan struct{}, 1), turn: make(chan struct{}, 1), quit: make(chan struct{})}
	for range sessionWorkers {
		b.wg.Add(1)
		go b.run()
	}
	return b
}

// stop ends the workers once their batches have run; calls still pending
// fail with errClosed.
func (b *sessionBatcher) stop() {
	b.mu.Lock()
	b.closed = true
	left := b.pending
	b.pending = nil
	b.mu.Unlock()
	for _, c := range left {
		c.err = errClosed
		close(c.done)
	}
	b.once.Do(func() { close(b.quit) })
	b.wg.Wait()
}

// submit queues a call for the next batch and waits for its outcome. A
// call whose context ends while it is still queued returns at once; once a
// batch has taken it, it runs uncanceled and its outcome is the call's.
func (b *sessionBatcher) submit(ctx context.Context, a store.Account, rename string, t store.RefreshToken) (store.Account, bool, error) {
	if err := ctx.Err(); err != nil {
		return store.Account{}, false, err
	}
	c := &sessionCall{ctx: ctx, a: a, rename: rename, t: t, done: make(chan struct{})}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return store.Account{}, false, errClosed
	}
	b.pending = append(b.pending, c)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		if b.unqueue(c) {
			return store.Account{}, false, ctx.Err()
		}
		<-c.done
	}
	return c.acc, c.created, c.err
}

// unqueue takes c out of the pending calls; false if a batch has taken it
// (or the batcher has stopped), so that it gets an outcome of its own.
func (b *sessionBatcher) unqueue(c *sessionCall) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i := slices.Index(b.pending, c); i >= 0 {
		b.pending = slices.Delete(b.pending, i, i+1)
		return true
	}
	return false
}

func (b *sessionBatcher) run() {
	defer b.wg.Done()
	for {
		select {
		case b.turn <- struct{}{}:
		case <-b.quit:
			return
		}
		// The worker keeps the turn from one batch to the next, so that
		// the next statement starts as soon as one has run, with no
		// goroutine hand-off in between; it gives the turn back when a
		// statement runs for overlap().
		for kept := true; kept; {
			batch := b.gather()
			if batch == nil {
				<-b.turn
				return
			}
			t := time.AfterFunc(b.overlap(), func() { <-b.turn })
			b.runBatch(batch, func() { kept = t.Stop() })
		}
	}
}

// overlap is how long a statement runs before the next batch may start
// beside it.
func (b *sessionBatcher) overlap() time.Duration {
	return min(max(sessionOverlapFactor*time.Duration(b.typical.Load()), minSessionOverlap), maxSessionOverlap)
}

// observe adds a statement's duration to the typical one (an exponential
// average, an eighth to each new statement). A statement stuck on a lock
// counts as maxSessionOverlap, so that one stall does not hold the
// overlap at its bound for long.
func (b *sessionBatcher) observe(d time.Duration) {
	d = min(d, maxSessionOverlap)
	for {
		old := b.typical.Load()
		if b.typical.CompareAndSwap(old, old+(int64(d)-old)/8) {
			return
		}
	}
}

// gather waits for a call and returns it with those pending beside it, up
// to maxSessionBatch; nil once the batcher stops.
func (b *sessionBatcher) gather() []*sessionCall {
	for {
		b.mu.Lock()
		if n := min(len(b.pending), maxSessionBatch); n > 0 {
			batch := slices.Clone(b.pending[:n])
			b.pending = slices.Delete(b.pending, 0, n)
			b.mu.Unlock()
			return batch
		}
		b.mu.Unlock()
		select {
		case <-b.wake:
		case <-b.quit:
			return nil
		}
	}
}

// runBatch runs batch; ran is called once its statement has run. The calls
// it settles (or that were canceled) return then; the others run on their
// own, in goroutines of their own, and return when they are done.
func (b *sessionBatcher) runBatch(batch []*sessionCall, ran func()) {
	// The calls the statement settles: live ones, each device and account
	// id once, and no renames (they are rare, and renaming in the
	// statement would join accounts in a way whose plan can go stale, as
	// below).
	var live, alone []*sessionCall
	type dev struct{ tenant, device string }
	devices, ids := map[dev]bool{}, map[string]bool{}
	for _, c := range batch {
		if c.err = c.ctx.Err(); c.err != nil {
			continue
		}
		d := dev{c.a.TenantID, c.a.DeviceID}
		if devices[d] || ids[c.a.ID] || c.rename != "" {
			alone = append(alone, c)
			c.alone = true
			continue
		}
		devices[d], ids[c.a.ID] = true, true
		live = append(live, c)
	}
	if len(live) > 0 { // one call too: one round trip, where a transaction of its own takes four
		ctx, cancel := context.WithTimeout(context.Background(), sessionBatchTimeout)
		start := time.Now()
		settled, err := b.s.sessionsIn(ctx, live)
		b.observe(time.Since(start))
		cancel()
		for i, c := range live {
			if err != nil || !settled[i] {
				alone = append(alone, c)
				c.alone = true
			}
		}
	}
	ran()
	for _, c := range batch {
		if !c.alone {
			close(c.done)
		}
	}
	// One by one, but at once: with group commit they share commits.
	for _, c := range alone {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			c.acc, c.created, c.err = b.s.deviceSessionTx(c.ctx, c.a, c.rename, c.t)
			close(c.done)
		}()
	}
}

// sessionsIn signs in calls (distinct devices and account ids) in one
// statement, which commits by itself. settled[i] reports whether calls[i]
// got its outcome; if err is set, nothing was stored.
func (s *DB) sessionsIn(ctx context.Context, calls []*sessionCall) (settled []bool, err error) {
	// The calls as VALUES rows, padded to a power of two with rows the
	// statement skips (o < 0): few statement texts, so PostgreSQL soon
	// keeps a plan for each, per connection. (Arrays and unnest would make
	// one text, but PostgreSQL then plans every execution anew: it costs
	// unnest's rows differently with and without the arrays at hand, and
	// planning took more time than running.)
	rows := 1
	for rows < len(calls) {
		rows *= 2
	}
	args := make([]any, 0, 14*rows)
	for i, c := range calls {
		a, t := c.a, c.t
		args = append(args, i, a.ID, a.TenantID, nullString(a.DeviceID), nullString(a.Email), a.PasswordHash, nullString(a.CustomID),
			a.DisplayName, ToDB(a.CreatedAt), ToDB(a.UpdatedAt), t.Hash, t.FamilyID, ToDB(t.CreatedAt), ToDB(t.ExpiresAt))
	}
	for range rows - len(calls) {
		args = append(args, -1, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil)
	}
	// v: the calls; ins: the accounts created; old: the accounts the
	// devices had (the statement's snapshot, before ins); then each call's
	// refresh token, for the account it got. The lookup is LATERAL ...
	// LIMIT 1 so that it stays an index lookup whatever the plan:
	// PostgreSQL keeps a prepared statement's generic plan, and one made
	// while the table was small would join it by scanning all of it,
	// however big it grew since.
	q := `WITH v AS (SELECT * FROM (VALUES ` +
		strings.TrimSuffix(strings.Repeat(`(?::bigint, ?::text, ?::text, ?::text, ?::text, ?::text, ?::text, ?::text,
			?::bigint, ?::bigint, ?::bytea, ?::text, ?::bigint, ?::bigint), `, rows), ", ") + `)
			AS v (o, id, tenant_id, device_id, email, password_hash, custom_id, display_name, created_at, updated_at,
			hash, family_id, t_created, t_expires) WHERE o >= 0),
		ins AS (INSERT INTO accounts (` + accountCols + `)
			SELECT id, tenant_id, device_id, email, password_hash, custom_id, display_name, created_at, updated_at FROM v ORDER BY o
			ON CONFLICT DO NOTHING RETURNING id),
		old AS (SELECT v.o, x.* FROM v CROSS JOIN LATERAL (SELECT ` + accountCols + ` FROM accounts
			WHERE tenant_id = v.tenant_id AND device_id = v.device_id LIMIT 1) x),
		tok AS (INSERT INTO refresh_tokens (hash, family_id, tenant_id, account_id, created_at, expires_at, used_at, revoked)
			SELECT v.hash, v.family_id, v.tenant_id, COALESCE(ins.id, old.id), v.t_created, v.t_expires, NULL, 0
			FROM v LEFT JOIN ins ON ins.id = v.id LEFT JOIN old ON old.o = v.o
			WHERE ins.id IS NOT NULL OR old.id IS NOT NULL ORDER BY v.o)
		SELECT v.o, ins.id IS NOT NULL, old.id, old.tenant_id, old.device_id, old.email, old.password_hash, old.custom_id,
			old.display_name, old.created_at, old.updated_at
		FROM v LEFT JOIN ins ON ins.id = v.id LEFT JOIN old ON old.o = v.o`
	res, err := s.W.QueryContext(ctx, s.q(q), args...)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	settled = make([]bool, len(calls))
	type outcome struct {
		acc     store.Account
		created bool
		ok      bool
	}
	out := make([]outcome, len(calls))
	for res.Next() {
		var o int
		var created bool
		var id, tenant, device, email, hash, custom, name sql.NullString
		var createdAt, updatedAt sql.NullInt64
		if err := res.Scan(&o, &created, &id, &tenant, &device, &email, &hash, &custom, &name, &createdAt, &updatedAt); err != nil {
			return nil, err
		}
		if o < 0 || o >= len(calls) {
			return nil, fmt.Errorf("device sessions: row %d of %d calls", o, len(calls))
		}
		switch {
		case created:
			out[o] = outcome{acc: calls[o].a, created: true, ok: true}
		case id.Valid:
			out[o] = outcome{acc: store.Account{ID: id.String, TenantID: tenant.String, DeviceID: device.String, Email: email.String,
				PasswordHash: hash.String, CustomID: custom.String, DisplayName: name.String,
				CreatedAt: FromDB(createdAt.Int64), UpdatedAt: FromDB(updatedAt.Int64)}, ok: true}
		}
	}
	if err := res.Err(); err != nil {
		return nil, err
	}
	// The statement has committed: the settled calls' outcomes stand.
	for i, c := range calls {
		if out[i].ok {
			c.acc, c.created, c.err = out[i].acc, out[i].created, nil
			settled[i] = true
		}
	}
	return settled, nil
}
