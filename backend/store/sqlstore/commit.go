package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
)

// Group commit (Dialect.GroupCommit, SQLite).
//
// SQLite has one writer. Rather than one transaction per call, concurrent
// write calls queue their work for one committer goroutine, which runs each
// call's work in its own savepoint of a shared transaction and commits once
// for the batch: the commit (WAL frames written, locks taken) is paid once
// for up to maxBatch calls. A call whose work fails is rolled back to its
// savepoint and gets its error; the others are unaffected. A call returns
// only after the batch committed (or failed as a whole, then with the
// commit's error), so "returned nil" still means "durable as configured".
//
// Work in a batch runs with a context that is never canceled: a call whose
// context ends before its work starts is skipped (it gets the context's
// error); once started, its statements (short, on the writer's own
// connection) run to the end. Interrupting a statement mid-batch could roll
// back the whole transaction and with it the other calls' work.

// maxBatch bounds the calls committed together.
const maxBatch = 64

// maxCachedStmts bounds each prepared-statement cache.
const maxCachedStmts = 512

// errClosed answers calls made after Close.
var errClosed = errors.New("store closed")

type job struct {
	ctx  context.Context
	fn   func(*tx) error
	done chan error // buffered: the committer never blocks on it
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

// submit runs fn in the next group commit and returns its outcome.
func (s *DB) submit(ctx context.Context, fn func(*tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	j := &job{ctx: ctx, fn: fn, done: make(chan error, 1)}
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
		// The work may still commit, as when a commit's reply is lost.
		return ctx.Err()
	}
}

func (s *DB) runCommits() {
	defer close(s.c.stopped)
	for {
		var first *job
		select {
		case first = <-s.c.jobs:
		case <-s.c.stop:
			return
		}
		batch := []*job{first}
	drain:
		for len(batch) < maxBatch {
			select {
			case j := <-s.c.jobs:
				batch = append(batch, j)
			default:
				break drain
			}
		}
		s.commitBatch(batch)
		s.prepareWanted()
	}
}

func (s *DB) commitBatch(batch []*job) {
	live := batch[:0]
	for _, j := range batch {
		if err := j.ctx.Err(); err != nil {
			j.done <- err
			continue
		}
		live = append(live, j)
	}
	if len(live) == 0 {
		return
	}
	bg := context.Background()
	failAll := func(err error) {
		for _, j := range live {
			j.done <- err
		}
	}
	sqlTx, err := s.W.BeginTx(bg, nil)
	if err != nil {
		failAll(err)
		return
	}
	t := &tx{s: s, tx: sqlTx, fixed: bg}
	if len(live) == 1 { // no savepoint needed
		err := live[0].fn(t)
		var ce commitErr
		switch {
		case err == nil, errors.As(err, &ce):
			if cerr := sqlTx.Commit(); cerr != nil {
				failAll(cerr)
				return
			}
			if err != nil {
				err = ce.err
			}
		default:
			sqlTx.Rollback()
		}
		live[0].done <- err
		return
	}
	results := make([]error, len(live))
	for i, j := range live {
		if _, err := t.exec(bg, `SAVEPOINT job`); err != nil {
			sqlTx.Rollback()
			failAll(err)
			return
		}
		err := j.fn(t)
		var ce commitErr
		if errors.As(err, &ce) {
			err = ce.err // keep its changes, report its error
		} else if err != nil {
			if _, rerr := t.exec(bg, `ROLLBACK TO job`); rerr != nil {
				sqlTx.Rollback()
				failAll(errors.Join(err, rerr))
				return
			}
		}
		if _, rerr := t.exec(bg, `RELEASE job`); rerr != nil {
			sqlTx.Rollback()
			failAll(rerr)
			return
		}
		results[i] = err
	}
	if err := sqlTx.Commit(); err != nil {
		failAll(err)
		return
	}
	for i, j := range live {
		j.done <- results[i]
	}
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
