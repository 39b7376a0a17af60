package backend

import (
	"context"
	"time"
)

// Sweeps delete what has outlived its use, so that tables that grow with
// every login do not grow without end. Today that is the refresh tokens
// past their expiry: every login and every refresh stores one, a used one
// is kept (a second use of it revokes its family) until it expires, and
// after that it can never be used again, so it is deleted.

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
	total := 0
	for {
		n, err := s.store.DeleteExpiredRefreshTokens(ctx, now, sweepBatch)
		total += n
		if err != nil || n < sweepBatch {
			return total, err
		}
	}
}

// RunSweeps sweeps at once, then every interval (SweepInterval if zero),
// until ctx ends. Each backend replica may run it: a sweep deletes only
// what has expired, so two sweeps at once delete each row once.
func (s *Server) RunSweeps(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = SweepInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n, err := s.SweepRefreshTokens(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "backend: sweeping expired refresh tokens", "deleted", n, "err", err)
		} else if n > 0 {
			s.log.InfoContext(ctx, "backend: deleted expired refresh tokens", "deleted", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
