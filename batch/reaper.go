package batch

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"ludus.dev/ludus/clusterstate"
)

// ReaperElection is the name of the election of the reaper among workers.
const ReaperElection = "batch-reaper"

// ReaperConfig configures the reaper. The zero value is usable.
type ReaperConfig struct {
	// Every is the interval between two sweeps. Default 5 s.
	Every time.Duration
	// AdmitTimeout is how long a run may stay admitting (its launcher filling
	// the queue) before it is ended as orphaned. Default 1 min.
	AdmitTimeout time.Duration
	// ItemTimeout is the longest a game may be leased, in wall time, before
	// its lease is ended and the game returns to the queue. Default: the
	// game's deadline in game time (a headless game runs far faster than
	// real time), at least 1 min.
	ItemTimeout time.Duration
	// KeepEnded is how long an ended run's record stays in etcd (GetRun reads
	// the backend after that). Default 24 h.
	KeepEnded time.Duration
	// Now is the clock; time.Now if nil.
	Now func() time.Time
}

func (c *ReaperConfig) defaults() {
	if c.Every <= 0 {
		c.Every = 5 * time.Second
	}
	if c.AdmitTimeout <= 0 {
		c.AdmitTimeout = time.Minute
	}
	if c.KeepEnded <= 0 {
		c.KeepEnded = 24 * time.Hour
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// RunReaper takes part in the reaper election without playing games, until
// ctx ends: for a backend whose batch games are all played by sim nodes'
// workers (which run with NoReaper, having no full Backend), so that runs
// still end at their deadlines, overdue games return to the queue and ended
// runs are recorded. It holds an etcd lease of ttl (default 10 s) named id
// in the election (default "reaper").
func RunReaper(ctx context.Context, etcd *clusterstate.Client, be Backend, id string, ttl time.Duration, cfg ReaperConfig, log *slog.Logger) error {
	if ttl <= 0 {
		ttl = 10 * time.Second
	}
	if id == "" {
		id = "reaper"
	}
	if log == nil {
		log = slog.Default()
	}
	for ctx.Err() == nil {
		lease, err := etcd.GrantLease(ctx, ttl)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("batch: reaper lease", "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		runReaper(ctx, etcd, be, lease, id, cfg, log) // returns when ctx ends or the lease is lost
		lease.Close()
	}
	return ctx.Err()
}

// runReaper campaigns for the reaper election with lease and sweeps while it
// leads, until ctx ends or the lease is lost. Every write a sweep makes is a
// compare-and-swap on the state it read, so a deposed reaper still sweeping
// does no harm.
func runReaper(ctx context.Context, etcd *clusterstate.Client, be Backend, lease *clusterstate.Lease, id string, cfg ReaperConfig, log *slog.Logger) {
	cfg.defaults()
	for ctx.Err() == nil {
		lead, err := etcd.Campaign(ctx, lease, ReaperElection, id)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-lease.Done():
				return
			case <-time.After(cfg.Every):
			}
			continue
		}
		t := time.NewTicker(cfg.Every)
	lead:
		for {
			if err := Reap(ctx, etcd, be, cfg); err != nil && ctx.Err() == nil {
				log.Warn("batch: reaper sweep", "err", err)
			}
			select {
			case <-ctx.Done():
				break lead
			case <-lead.Done():
				break lead
			case <-t.C:
			}
		}
		t.Stop()
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		lead.Resign(rctx)
		cancel()
	}
}

// Reap is one sweep of the reaper: it ends runs past their deadline, runs
// that spent their budget or are complete, and runs left admitting by a
// launcher that vanished; ends overdue games' leases (the game returns to
// the queue, and its worker stops playing it); records ended runs nobody
// recorded, or whose record a late charge changed (their usage is settled
// in etcd when they end, whoever ends them); removes orphaned queues and old
// ended runs' records; and has the backend delete runs past their retention.
func Reap(ctx context.Context, etcd *clusterstate.Client, be Backend, cfg ReaperConfig) error {
	cfg.defaults()
	now := cfg.Now()
	runs, err := etcd.BatchRuns(ctx, "")
	if err != nil {
		return err
	}
	var firstErr error
	note := func(err error) {
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	for _, r := range runs {
		switch r.State {
		case clusterstate.BatchAdmitting:
			if now.After(r.Deadline) || now.Sub(r.CreatedAt) > cfg.AdmitTimeout {
				note(endRun(ctx, etcd, be, r.Tenant, r.ID, clusterstate.BatchOrphaned))
			}
		case clusterstate.BatchRunning:
			_, p, err := etcd.BatchRunProgress(ctx, r.Tenant, r.ID)
			if err != nil {
				note(err)
				continue
			}
			switch {
			case now.After(r.Deadline):
				note(endRun(ctx, etcd, be, r.Tenant, r.ID, clusterstate.BatchDeadline))
			case p.Done >= r.Games:
				note(endRun(ctx, etcd, be, r.Tenant, r.ID, clusterstate.BatchComplete))
			case p.CPU >= r.BudgetCPU:
				note(endRun(ctx, etcd, be, r.Tenant, r.ID, clusterstate.BatchBudget))
			default:
				note(expireOverdue(ctx, etcd, r, cfg, now))
			}
		case clusterstate.BatchEnded:
			if !r.Recorded {
				note(recordRun(ctx, etcd, be, r.Tenant, r.ID))
			} else if now.Sub(r.EndedAt) > cfg.KeepEnded {
				note(etcd.RemoveBatchRun(ctx, r.Tenant, r.ID))
			}
		}
	}
	_, err = be.SweepBatchRuns(ctx)
	note(err)
	orphans, err := etcd.OrphanedBatchQueues(ctx)
	note(err)
	for _, o := range orphans {
		note(etcd.RemoveBatchQueue(ctx, o[0], o[1]))
	}
	return firstErr
}

// expireOverdue ends the leases of a run's games leased for longer than the
// item timeout.
func expireOverdue(ctx context.Context, etcd *clusterstate.Client, r clusterstate.BatchRun, cfg ReaperConfig, now time.Time) error {
	timeout := cfg.ItemTimeout
	if timeout <= 0 {
		var s Spec
		_ = json.Unmarshal(r.Spec, &s)
		timeout = max(time.Duration(s.GameTicks)*time.Second/time.Duration(max(s.TickRate, 1)), time.Minute)
	}
	leases, err := etcd.BatchLeases(ctx, r.Tenant, r.ID)
	if err != nil {
		return err
	}
	for n, l := range leases {
		if now.Sub(l.At) > timeout {
			if err := etcd.ExpireBatchLease(ctx, r.Tenant, r.ID, n, l); err != nil {
				return err
			}
		}
	}
	return nil
}
