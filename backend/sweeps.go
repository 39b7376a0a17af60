package backend

import (
	"context"
	"time"
)

// Sweeps delete what has outlived its use, so that tables that grow with
// every login or every match do not grow without end:
//   - refresh tokens past their expiry: every login and every refresh
//     stores one, a used one is kept (a second use of it revokes its
//     family) until it expires or its family has RefreshReuseMemory newer
//     used ones, and after that it can never be used again;
//   - the sessions of an account beyond its MaxRefreshFamilies newest: each
//     login starts a token family that lives RefreshTTL, so a client that
//     signs in over and over (a bug, a loop) would otherwise leave a family
//     per login for a month;
//   - matches that never reported once their credential expired: one is
//     registered for every game created, before a node takes it, and a
//     game no node took (or that never started) would leave it for good;
//   - webhook deliveries that were delivered or failed for good, a
//     WebhookDeliveryRetention after their last attempt: one is queued for
//     every final match result, and ListWebhookDeliveries shows the recent
//     ones. Pending deliveries stay until they finish;
//   - login throttles that no longer hold anyone back (last failure more
//     than ThrottleWindow ago, no lockout running): every failed email login
//     stores one, for any email, so a password sprayer's made-up emails
//     would otherwise stay for good. EmailLogin ignores such a throttle, so
//     deleting it changes nothing for the next attempt.

// WebhookDeliveryRetention is how long a finished webhook delivery is kept
// after its last attempt.
const WebhookDeliveryRetention = 7 * 24 * time.Hour

// SweepInterval is how often RunSweeps sweeps.
const SweepInterval = time.Hour

// sweepBatch is how many rows one sweep deletes per transaction: a backlog
// (a database upgraded from a version that kept every token) goes in many
// short transactions, not one long one.
const sweepBatch = 1000

// SweepRefreshTokens deletes the refresh tokens that have expired by now
// and returns how many it deleted.
func (s *Server) SweepRefreshTokens(ctx context.Context) (int, error) {
	now := s.now()
	return inBatches(func() (int, error) { return s.store.DeleteExpiredRefreshTokens(ctx, now, sweepBatch) })
}

// MaxRefreshFamilies is how many sessions (refresh-token families: one per
// login, each a device or a browser) an account keeps; the sweep ends the
// oldest beyond it, which must sign in again.
const MaxRefreshFamilies = 32

// SweepRefreshFamilies ends the sessions of every account beyond its
// MaxRefreshFamilies newest and returns how many tokens it deleted.
func (s *Server) SweepRefreshFamilies(ctx context.Context) (int, error) {
	total := 0
	for {
		trimmed, n, err := s.store.TrimRefreshFamilies(ctx, MaxRefreshFamilies, sweepBatch)
		total += n
		if err != nil || trimmed == 0 || n == 0 {
			return total, err
		}
	}
}

// SweepUnreportedMatches deletes the matches that never reported and no
// longer can (their credential expired) and returns how many it deleted.
func (s *Server) SweepUnreportedMatches(ctx context.Context) (int, error) {
	now := s.now()
	return inBatches(func() (int, error) { return s.store.DeleteUnreportedMatches(ctx, now, sweepBatch) })
}

// SweepWebhookDeliveries deletes the deliveries that finished (delivered,
// or failed for good) more than WebhookDeliveryRetention ago and returns
// how many it deleted.
func (s *Server) SweepWebhookDeliveries(ctx context.Context) (int, error) {
	before := s.now().Add(-WebhookDeliveryRetention)
	return inBatches(func() (int, error) { return s.store.DeleteFinishedDeliveries(ctx, before, sweepBatch) })
}

// SweepLoginThrottles deletes the login throttles that no longer hold
// anyone back and returns how many it deleted.
func (s *Server) SweepLoginThrottles(ctx context.Context) (int, error) {
	now := s.now()
	return inBatches(func() (int, error) {
		return s.store.DeleteStaleLoginThrottles(ctx, now.Add(-ThrottleWindow), now, sweepBatch)
	})
}

// inBatches calls del, which deletes up to sweepBatch rows, until it
// deletes fewer (or fails), and returns how many it deleted in all.
func inBatches(del func() (int, error)) (int, error) {
	total := 0
	for {
		n, err := del()
		total += n
		if err != nil || n < sweepBatch {
			return total, err
		}
	}
}

// RunSweeps sweeps at once, then every interval (SweepInterval if zero),
// until ctx ends; beside it, it reads the signing keys again every
// KeySyncInterval (keys.go). Every backend replica runs it; a sweep deletes only what
// has expired, whichever replica gets to it first.
func (s *Server) RunSweeps(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = SweepInterval
	}
	go s.runKeySync(ctx, KeySyncInterval)
	t := time.NewTicker(interval)
	defer t.Stop()
	sweeps := []struct {
		what  string
		sweep func(context.Context) (int, error)
	}{{"expired refresh tokens", s.SweepRefreshTokens}, {"surplus sessions' refresh tokens", s.SweepRefreshFamilies},
		{"unreported matches", s.SweepUnreportedMatches}, {"finished webhook deliveries", s.SweepWebhookDeliveries},
		{"stale login throttles", s.SweepLoginThrottles}}
	for {
		for _, sw := range sweeps {
			n, err := sw.sweep(ctx)
			if err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "backend: sweeping "+sw.what, "deleted", n, "err", err)
			} else if n > 0 {
				s.log.InfoContext(ctx, "backend: deleted "+sw.what, "deleted", n)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// runKeySync reads the signing keys from the store every interval until ctx
// ends, so that a rotation on another replica reaches this one.
func (s *Server) runKeySync(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.SyncSigningKeys(ctx); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "backend: reading the signing keys", "err", err)
		}
	}
}
