package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"ludus.dev/ludus/backend/store"
)

// Group commit (Dialect.GroupCommit: SQLite and PostgreSQL).
//
// Rather than one transaction per call, concurrent write calls queue their
// work for one committer goroutine, which runs the calls' work one after
// the other in one transaction on one connection and commits once for the
// batch: the commit is paid once for up to maxBatch calls. On SQLite (one
// writer) that is the WAL frames written and the locks taken; on
// PostgreSQL it is the WAL flush, and above all the time rows stay locked:
// calls that update the same rows (results of matches sharing a player)
// would otherwise run one after the other, each holding the shared rows
// locked through its own commit's flush, while in one batch they follow
// each other within one transaction and share one flush
// (docs/RATIONALE.md).
//
// A call whose work fails gets its error, and nothing of its work stays;
// the others are unaffected. The first attempt at a batch runs every call
// directly in the transaction. If a call fails, the transaction is rolled
// back and the batch runs again without it: the calls before it as before,
// each call after it in a savepoint of its own, rolled back to if it fails
// (on PostgreSQL a failed statement aborts the transaction, and ROLLBACK TO
// the savepoint is what lets the batch go on). So a batch whose calls all
// succeed, the usual case, spends no round trip on savepoints, and one
// with failures runs at most twice. Savepoints nest, all named "job": none
// is released (COMMIT ends them, ROLLBACK TO names the innermost).
//
// A call that fails in a way worth retrying (Dialect.Retry: a deadlock with
// another process's transaction) runs again in the next batch, up to
// maxTries times, once this batch's locks are released. A call returns
// only after the batch committed (or failed as a whole: then every call
// of it gets the error), so "returned nil" still means "durable as
// configured".
//
// Work in a batch runs with a context that only Dialect.BatchTimeout ends:
// a call whose context ends before its turn is skipped (its caller gets
// the context's error); once started, its statements run to the end, and
// the caller waits for the outcome even if its context ends meanwhile (so
// the outcome it reports is the real one, and it never reads what the work
// is still writing). Interrupting a statement mid-batch could roll back
// the whole transaction and with it the other calls' work.

const (
	// maxBatch bounds the calls committed together. On PostgreSQL each
	// savepoint that writes takes a subtransaction id, and a session keeps
	// 64 of them in shared memory before other sessions' snapshots get
	// slower.
	maxBatch = 64
	// maxTries bounds the runs of a call that keeps failing with a
	// retryable error (as inTx's retries without group commit).
	maxTries = 5
)

// maxCachedStmts bounds each prepared-statement cache.
const maxCachedStmts = 512

// errClosed answers calls made after Close.
var errClosed = errors.New("store closed")

// Job states: the caller and the committer race to move a queued job.
const (
	jobQueued    int32 = iota
	jobStarted         // the committer runs it: the caller waits for done
	jobAbandoned       // the caller gave up first: the committer skips it
)

type job struct {
	ctx context.Context
	fn  func(*tx) error
	// steps, if set, is fn's work as two statements (Dialect.Pipeline).
	steps twoStep
	state atomic.Int32
	tries int        // committer only
	done  chan error // buffered: the committer never blocks on it
}

type committer struct {
	jobs    chan *job
	stop    chan struct{}
	stopped chan struct{}
	once    sync.Once
	// wanted are write queries to prepare between batches (the writer's one
	// connection is free then). Only the committer goroutine touches it.
	wanted map[string]bool
}

func (s *DB) startCommitter() {
	s.c = &committer{jobs: make(chan *job), stop: make(chan struct{}), stopped: make(chan struct{}), wanted: map[string]bool{}}
	go s.runCommits()
}

func (s *DB) stopCommitter() {
	if s.c == nil {
		return
	}
	s.c.once.Do(func() { close(s.c.stop) })
	<-s.c.stopped
}

// submit runs fn in the next group commit and returns its outcome. steps,
// if set, is fn's work as two statements.
func (s *DB) submit(ctx context.Context, fn func(*tx) error, steps twoStep) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	j := &job{ctx: ctx, fn: fn, steps: steps, done: make(chan error, 1)}
	select {
	case s.c.jobs <- j:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.c.stop:
		return errClosed
	}
	select {
	case err := <-j.done:
		return err
	case <-ctx.Done():
		if j.state.CompareAndSwap(jobQueued, jobAbandoned) {
			return ctx.Err()
		}
		return <-j.done // started: its batch ends (within Dialect.BatchTimeout)
	}
}

func (s *DB) runCommits() {
	defer close(s.c.stopped)
	var again []*job // to run again in the next batch
	for {
		batch := again
		if len(batch) == 0 {
			select {
			case j := <-s.c.jobs:
				batch = append(batch, j)
			case <-s.c.stop:
				return
			}
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case j := <-s.c.jobs:
				batch = append(batch, j)
			default:
				break drain
			}
		}
		again = s.commitBatch(batch)
		s.prepareWanted()
	}
}

// commitBatch runs batch in one transaction and reports each job's outcome,
// except for the jobs it returns, which failed in a way worth retrying and
// must run again.
func (s *DB) commitBatch(batch []*job) (again []*job) {
	ctx := context.Background()
	if s.d.BatchTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.d.BatchTimeout)
		defer cancel()
	}
	b := &batchRun{s: s, ctx: ctx, jobs: batch, out: make([]error, len(batch)), decided: make([]bool, len(batch)),
		ran: make([]bool, len(batch)), abandoned: make([]bool, len(batch)), savepointsFrom: len(batch)}
	for _, j := range batch {
		j.tries++
	}
	for {
		var failed int
		var jobErr, err error
		if s.d.Pipeline != nil {
			failed, jobErr, err = b.runPiped()
		} else {
			failed, jobErr, err = b.run()
		}
		if err != nil {
			// The transaction failed as a whole: every job's work is
			// lost, and every job of the batch gets the error (but
			// those that never ran: their caller gave up first).
			for i := range batch {
				if b.ran[i] || !b.decided[i] {
					b.out[i], b.decided[i] = err, true
				}
			}
			break
		}
		if failed < 0 {
			break // committed
		}
		if errors.Is(jobErr, errStepsUnfit) {
			// A job's statements could not be sent as steps: the
			// transaction is rolled back, and the batch runs again with
			// the job run by its fn, in a savepoint from it on.
			batch[failed].steps = nil
			b.savepointsFrom = failed
			continue
		}
		// A job failed outside a savepoint: the transaction is rolled
		// back, the job keeps its error, and the batch runs again
		// without it, each job after it in a savepoint of its own.
		b.out[failed], b.decided[failed] = jobErr, true
		b.savepointsFrom = failed + 1
	}
	for i, j := range batch {
		switch {
		case b.abandoned[i]:
		case s.retryable(j, b.out[i]):
			again = append(again, j)
		default:
			j.done <- b.out[i]
		}
	}
	return again
}

// batchRun is one batch's jobs and outcomes across its attempts.
type batchRun struct {
	s    *DB
	ctx  context.Context
	jobs []*job
	out  []error
	// decided jobs have their outcome and do not run again; the others'
	// outcome stands once the transaction commits. ran: the job's work
	// ran (its outcome then depends on the transaction's).
	decided, ran, abandoned []bool
	// savepointsFrom: jobs from this index on run in savepoints. The first
	// attempt uses none (a round trip saved per job on PostgreSQL);
	// after a failure, the jobs before it (which succeeded) run as before
	// and the ones after it each get one, so a batch runs at most twice
	// however many of its jobs fail.
	savepointsFrom int
}

// start is called at job i's first turn: it reports whether the job is to
// run. A job whose caller gave up (jobAbandoned) is skipped; one whose
// context has ended gets the context's error.
func (b *batchRun) start(i int) bool {
	j := b.jobs[i]
	if j.state.Load() == jobStarted {
		return true // its turn came before (an earlier attempt, or an earlier batch)
	}
	if !j.state.CompareAndSwap(jobQueued, jobStarted) {
		b.decided[i], b.abandoned[i] = true, true
		return false
	}
	if err := j.ctx.Err(); err != nil {
		b.out[i], b.decided[i] = err, true
		return false
	}
	return true
}

// run makes one attempt at the batch's undecided jobs. It returns the
// index of a job that failed outside a savepoint and its error (the
// transaction is then rolled back), or failed < 0 with err the outcome of
// the transaction (nil: committed).
func (b *batchRun) run() (failed int, jobErr, err error) {
	undecided := 0
	for i := range b.jobs {
		if !b.decided[i] {
			undecided++
		}
	}
	var sqlTx *sql.Tx
	var t *tx
	for i := range b.jobs {
		if b.decided[i] || !b.start(i) {
			continue
		}
		if sqlTx == nil {
			if sqlTx, err = b.s.W.BeginTx(b.ctx, nil); err != nil {
				return -1, nil, err
			}
			t = &tx{s: b.s, tx: sqlTx, fixed: b.ctx}
		}
		if f, je, err := b.runJob(i, t, i >= b.savepointsFrom && undecided > 1); err != nil || f >= 0 {
			sqlTx.Rollback()
			return f, je, err
		}
	}
	if sqlTx == nil {
		return -1, nil, nil // nothing ran
	}
	return -1, nil, sqlTx.Commit()
}

// runJob runs job i in t, in a savepoint if savepoint, and records its
// outcome. A failure that ends the batch's transaction is returned as run
// returns it (failed >= 0: that job's own error; err: the transaction's);
// the caller rolls back.
func (b *batchRun) runJob(i int, t *tx, savepoint bool) (failed int, jobErr, err error) {
	b.ran[i] = true
	if savepoint {
		// Savepoints nest, all named job: none is released (COMMIT
		// ends them, ROLLBACK TO names the innermost).
		if _, err := t.exec(b.ctx, `SAVEPOINT job`); err != nil {
			return -1, nil, err
		}
	}
	err = b.jobs[i].fn(t)
	var ce commitErr
	if errors.As(err, &ce) {
		err = ce.err // keep its changes, report its error
	} else if err != nil {
		if !savepoint {
			return i, err, nil
		}
		// On PostgreSQL a failed statement aborts the transaction
		// until this.
		if _, rerr := t.exec(b.ctx, `ROLLBACK TO job`); rerr != nil {
			return -1, nil, errors.Join(err, rerr)
		}
	}
	b.out[i] = err
	return -1, nil, nil
}

// retryable reports whether j failed with err in a way worth running it
// again, and has tries left.
func (s *DB) retryable(j *job, err error) bool {
	return j.tries < maxTries && s.d.Retry != nil && s.d.Retry(err)
}

// Prepared statements (Dialect.CacheStatements, SQLite: pgx caches its own).

type stmtCache struct {
	m sync.Map // query text -> *sql.Stmt
	n atomic.Int32
}

// writeStmt returns the prepared write statement of query, or nil (then it
// asks for it to be prepared after the batch: the writer's connection is
// busy with the transaction now, and preparing on the pool would wait for it).
func (s *DB) writeStmt(query string) *sql.Stmt {
	if !s.d.CacheStatements || s.c == nil {
		return nil
	}
	if v, ok := s.wstmts.m.Load(query); ok {
		return v.(*sql.Stmt)
	}
	if s.wstmts.n.Load() < maxCachedStmts {
		s.c.wanted[query] = true
	}
	return nil
}

func (s *DB) prepareWanted() {
	for q := range s.c.wanted {
		delete(s.c.wanted, q)
		if s.wstmts.n.Load() >= maxCachedStmts {
			continue
		}
		if st, err := s.W.PrepareContext(context.Background(), s.q(q)); err == nil {
			s.wstmts.m.Store(q, st)
			s.wstmts.n.Add(1)
		}
	}
}

// readStmt returns the prepared read statement of query, preparing it on
// first use; nil if that fails or the cache is full.
func (s *DB) readStmt(ctx context.Context, query string) *sql.Stmt {
	if !s.d.CacheStatements {
		return nil
	}
	if v, ok := s.rstmts.m.Load(query); ok {
		return v.(*sql.Stmt)
	}
	if s.rstmts.n.Load() >= maxCachedStmts {
		return nil
	}
	st, err := s.R.PrepareContext(ctx, s.q(query))
	if err != nil {
		return nil
	}
	if v, loaded := s.rstmts.m.LoadOrStore(query, st); loaded {
		st.Close()
		return v.(*sql.Stmt)
	}
	s.rstmts.n.Add(1)
	return st
}

// Pipelined batches (Dialect.Pipeline: PostgreSQL).
//
// On one connection the calls of a batch run in turn, so their round trips
// add up: a match report is two (matches_cte.go), and the transaction two
// more, BEGIN and COMMIT. With Dialect.Pipeline the committer begins and
// commits the transaction itself on a connection of its own, and runs
// consecutive jobs that are two steps (twoStep: match reports) in rounds:
// the first statements of a round's jobs are sent together, BEGIN before
// them if the transaction has not begun; then, built from their rows, the
// second statements, COMMIT after them if no job follows. A batch of
// match reports is then two round trips, however many reports it holds.
//
// Within a round every first statement runs before every second one, not
// one job's after the other's as in turn. So jobs that read rows another
// job's second statement writes must not share a round: reports of one
// match (the match's totals so far) never do; reports sharing a player
// share its rating row, which a report reads (locked) in its first
// statement and writes in its second, so the round keeps what each
// report's second statement writes (round.ratings) and the next report
// rates from it. Every other row the second statements write they update
// relative to the row's current value, in the order of the jobs.
//
// Failures stay isolated as in run: a statement that fails aborts the
// transaction (PostgreSQL skips the pipeline's later statements, the
// COMMIT too), which is rolled back, and the batch runs again without that
// job, the jobs after it one at a time in savepoints. A COMMIT that
// fails, or a connection that fails, fails the batch as a whole.

// twoStep is a job's work as two statements, the second built from the
// first's rows (reportSteps).
type twoStep interface {
	// roundKey: jobs with equal keys never share a round.
	roundKey() string
	// first is the first statement ("?" placeholders) and the reader of
	// its rows (which resets what an earlier attempt read).
	first() (query string, args []any, rows func(Rows) error)
	// second is the second statement ("" if none), given the round so
	// far; an error fails the job (its first statement is rolled back).
	second(rd *round) (query string, args []any, rows func(Rows) error, err error)
	// outcome is the job's outcome once both statements ran. An error here
	// must be one whose statements changed nothing (a report whose claim
	// missed): it stands without a rollback.
	outcome() error
}

// round is what the second statements of a round write that later jobs of
// the round build on.
type round struct {
	ratings map[ratingKey]store.Rating
}

// pipeTx is a transaction the committer began itself on conn.
type pipeTx struct {
	b     *batchRun
	conn  *sql.Conn
	begun bool
	t     *tx
}

// pipe sends stmts in one round trip on the connection.
func (p *pipeTx) pipe(stmts []PipeStmt) (failed int, err error) {
	failed = -1
	rerr := p.conn.Raw(func(dc any) error {
		failed, err = p.b.s.d.Pipeline(p.b.ctx, dc, stmts)
		return nil
	})
	if rerr != nil {
		return -1, rerr
	}
	return failed, err
}

// exec runs a statement of the committer's own (BEGIN, COMMIT, ROLLBACK).
func (p *pipeTx) exec(query string) error {
	st := PipeStmt{Query: query}
	if query == "COMMIT" {
		st.Tag = commitTag
	}
	_, err := p.pipe([]PipeStmt{st})
	return err
}

// commitTag checks the tag of a COMMIT: PostgreSQL answers the COMMIT of
// a failed transaction with ROLLBACK, and no error.
func commitTag(tag string) error {
	if tag != "COMMIT" {
		return fmt.Errorf("commit: the transaction was rolled back (%q)", tag)
	}
	return nil
}

// end rolls the transaction back if it is open and returns the connection
// to the pool, or closes it if its state is unknown.
func (p *pipeTx) end(rollback bool) {
	if p.conn == nil {
		return
	}
	if rollback && p.begun {
		// Not the batch's context: it may be what ended the batch.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := p.conn.ExecContext(ctx, "ROLLBACK")
		cancel()
		if err != nil {
			p.conn.Raw(func(any) error { return driver.ErrBadConn }) // the pool drops it
		}
	}
	p.conn.Close()
	p.conn = nil
}

// runPiped is run with Dialect.Pipeline.
func (b *batchRun) runPiped() (failed int, jobErr, err error) {
	undecided := 0
	for i := range b.jobs {
		if !b.decided[i] {
			undecided++
		}
	}
	p := &pipeTx{b: b}
	committed := false
	defer func() { p.end(!committed) }()
	connect := func() error {
		if p.conn != nil {
			return nil
		}
		c, err := b.s.W.Conn(b.ctx)
		if err != nil {
			return err
		}
		p.conn, p.t = c, &tx{s: b.s, c: c, fixed: b.ctx}
		return nil
	}
	ran := false
	for i := 0; i < len(b.jobs); i++ {
		j := b.jobs[i]
		if b.decided[i] || !b.start(i) {
			continue
		}
		ran = true
		if err := connect(); err != nil {
			return -1, nil, err
		}
		savepoint := i >= b.savepointsFrom && undecided > 1
		if j.steps != nil && !savepoint {
			// A round: this job and the step jobs after it, up to one
			// sharing its key, or to the first of the savepoints.
			rd := []int{i}
			keys := map[string]bool{j.steps.roundKey(): true}
			k := i + 1
			for ; k < len(b.jobs) && k < b.savepointsFrom && len(rd) < maxBatch; k++ {
				if b.decided[k] {
					continue
				}
				jk := b.jobs[k]
				if jk.steps == nil || keys[jk.steps.roundKey()] {
					break
				}
				if !b.start(k) {
					continue
				}
				keys[jk.steps.roundKey()] = true
				rd = append(rd, k)
			}
			last := true
			for m := k; m < len(b.jobs); m++ {
				if !b.decided[m] {
					last = false
				}
			}
			done, f, ferr, err := b.runRound(p, rd, last)
			if err != nil || f >= 0 {
				return f, ferr, err
			}
			if done {
				committed = true
				return -1, nil, nil
			}
			i = k - 1
			continue
		}
		if !p.begun {
			if err := p.exec("BEGIN"); err != nil {
				return -1, nil, err
			}
			p.begun = true
		}
		if f, je, err := b.runJob(i, p.t, savepoint); err != nil || f >= 0 {
			return f, je, err // the deferred end rolls back
		}
	}
	if !ran || !p.begun {
		return -1, nil, nil // nothing ran
	}
	if err := p.exec("COMMIT"); err != nil {
		return -1, nil, err
	}
	committed = true
	return -1, nil, nil
}

// runRound runs the jobs rd (started, in order) as a round: their first
// statements in one round trip, their second ones in another, followed by
// COMMIT if commit (committed: it was). It returns as run does; failed >= 0
// leaves the transaction to be rolled back.
func (b *batchRun) runRound(p *pipeTx, rd []int, commit bool) (committed bool, failed int, jobErr, err error) {
	stmts := make([]PipeStmt, 0, len(rd)+1)
	off := 0
	if !p.begun {
		stmts = append(stmts, PipeStmt{Query: "BEGIN"})
		off = 1
	}
	for _, i := range rd {
		b.ran[i] = true
		q, args, rows := b.jobs[i].steps.first()
		stmts = append(stmts, PipeStmt{Query: b.s.q(q), Args: args, Rows: rows})
	}
	f, err := p.pipe(stmts)
	if off == 1 && f != 0 {
		p.begun = true // BEGIN ran (if the connection failed: the rollback fails, and the connection is dropped)
	}
	if err != nil {
		if f < off {
			return false, -1, nil, err
		}
		return false, rd[f-off], err, nil
	}
	var st round
	stmts = stmts[:0]
	var of []int // the job of each statement
	for _, i := range rd {
		q, args, rows, err := b.jobs[i].steps.second(&st)
		if err != nil {
			return false, i, err, nil
		}
		if q != "" {
			stmts = append(stmts, PipeStmt{Query: b.s.q(q), Args: args, Rows: rows})
			of = append(of, i)
			if rows != nil {
				// A statement whose rows could fail the job after the
				// COMMIT ran: commit apart.
				commit = false
			}
		}
	}
	if commit {
		stmts = append(stmts, PipeStmt{Query: "COMMIT", Tag: commitTag})
	}
	if len(stmts) > 0 {
		f, err := p.pipe(stmts)
		if err != nil {
			if f < 0 || f >= len(of) {
				return false, -1, nil, err // the COMMIT, or the connection
			}
			return false, of[f], err, nil
		}
	}
	for _, i := range rd {
		b.out[i] = b.jobs[i].steps.outcome()
	}
	return commit, -1, nil, nil
}
