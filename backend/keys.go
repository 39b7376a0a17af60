package backend

import (
	"context"
	"fmt"
	"time"

	"ludus.dev/ludus/auth"
	"ludus.dev/ludus/backend/store"
)

// loadKeys builds the key set from the store, drops keys past their
// retention, and makes a first key if there is no current one.
func (s *Server) loadKeys(ctx context.Context) error {
	recs, err := s.store.ListSigningKeys(ctx)
	if err != nil {
		return fmt.Errorf("backend: load signing keys: %w", err)
	}
	keys := make([]auth.SigningKey, 0, len(recs))
	for _, r := range recs {
		priv, err := auth.ParsePrivate(r.Private)
		if err != nil {
			return fmt.Errorf("backend: signing key %s: %w", r.ID, err)
		}
		keys = append(keys, auth.SigningKey{ID: r.ID, Private: priv, CreatedAt: r.CreatedAt, RetiredAt: r.RetiredAt})
	}
	s.keys, err = auth.NewKeySet(s.now, keys...)
	if err != nil {
		return fmt.Errorf("backend: signing keys: %w", err)
	}
	s.prune(ctx)
	if _, ok := s.keys.Current(); !ok {
		if _, err := s.RotateSigningKey(ctx); err != nil {
			return err
		}
	}
	return nil
}

// RotateSigningKey makes a new current ticket signing key. The new key (and the
// old one, now retired) are stored before the new key signs anything, so a
// restart never loses a key that signed a live ticket. The old key stays
// published until its last ticket has expired.
func (s *Server) RotateSigningKey(ctx context.Context) (kid string, err error) {
	select {
	case s.rotateInFlight <- struct{}{}:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	defer func() { <-s.rotateInFlight }()

	k, err := auth.GenerateKey(s.now().UTC().Truncate(time.Microsecond)) // the store keeps µs
	if err != nil {
		return "", err
	}
	rec, err := keyRecord(k)
	if err != nil {
		return "", err
	}
	recs := []store.SigningKey{rec}
	if cur, ok := s.keys.Current(); ok {
		cur.RetiredAt = k.CreatedAt
		old, err := keyRecord(cur)
		if err != nil {
			return "", err
		}
		recs = append(recs, old)
	}
	if err := s.store.PutSigningKeys(ctx, recs...); err != nil {
		return "", fmt.Errorf("backend: store signing key: %w", err)
	}
	if err := s.keys.RotateTo(k); err != nil {
		return "", fmt.Errorf("backend: rotate: %w", err)
	}
	s.prune(ctx)
	s.log.InfoContext(ctx, "backend: new ticket signing key", "kid", k.ID)
	return k.ID, nil
}

// prune drops expired keys from the set and the store. A failure to delete is
// harmless (the keys are no longer published) and retried next time.
func (s *Server) prune(ctx context.Context) {
	ids := s.keys.Prune()
	if len(ids) == 0 {
		return
	}
	if err := s.store.DeleteSigningKeys(ctx, ids...); err != nil {
		s.log.WarnContext(ctx, "backend: delete expired signing keys", "kids", ids, "err", err)
	}
}

func keyRecord(k auth.SigningKey) (store.SigningKey, error) {
	der, err := auth.MarshalPrivate(k.Private)
	if err != nil {
		return store.SigningKey{}, err
	}
	return store.SigningKey{ID: k.ID, Private: der, CreatedAt: k.CreatedAt, RetiredAt: k.RetiredAt}, nil
}
