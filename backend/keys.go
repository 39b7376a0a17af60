package backend

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"ludus.dev/ludus/auth"
	"ludus.dev/ludus/backend/store"
)

// Every backend replica signs tickets and publishes its keys, and any one
// may rotate them: the store is the truth. A replica reads it at start,
// every KeySyncInterval after (RunSweeps), and at once (at most once a
// second) when it is asked for its public keys or meets a ticket of a key it
// does not know, so a rotation on one replica reaches the others within
// seconds: they sign with the new key and publish it, and gateways that
// refetch on the new kid find it whichever replica answers.

// KeySyncInterval is how often each replica reads the signing keys again.
const KeySyncInterval = 10 * time.Second

// keySyncMinGap bounds the reads that public-key requests and unknown kids
// trigger: forged kids cannot make a replica read the store more than once
// a second.
const keySyncMinGap = time.Second

// storedKeys reads the signing keys from the store.
func (s *Server) storedKeys(ctx context.Context) ([]auth.SigningKey, error) {
	recs, err := s.store.ListSigningKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("backend: load signing keys: %w", err)
	}
	keys := make([]auth.SigningKey, 0, len(recs))
	for _, r := range recs {
		priv, err := auth.ParsePrivate(r.Private)
		if err != nil {
			return nil, fmt.Errorf("backend: signing key %s: %w", r.ID, err)
		}
		keys = append(keys, auth.SigningKey{ID: r.ID, Private: priv, CreatedAt: r.CreatedAt, RetiredAt: r.RetiredAt})
	}
	return keys, nil
}

// loadKeys builds the key set from the store, drops keys past their
// retention, and makes a first key if there is no current one.
func (s *Server) loadKeys(ctx context.Context) error {
	keys, err := s.storedKeys(ctx)
	if err != nil {
		return err
	}
	s.keys, err = auth.NewKeySet(s.now, keys...)
	if err != nil {
		return fmt.Errorf("backend: signing keys: %w", err)
	}
	s.keySynced.Store(time.Now().UnixNano())
	s.prune(ctx)
	if _, ok := s.keys.Current(); !ok {
		if _, err := s.RotateSigningKey(ctx); err != nil {
			return err
		}
	}
	return nil
}

// SyncSigningKeys makes the key set what the store holds: keys another
// replica rotated to are used and published, keys it pruned are dropped.
// A store that holds no key at all leaves the set as it is (the keys were
// lost, and dropping them would stop every login; loadKeys makes one at the
// next start). It takes the rotation's turn, so a rotation on this replica
// is never undone by a read from before it.
func (s *Server) SyncSigningKeys(ctx context.Context) error {
	select {
	case s.rotateInFlight <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.rotateInFlight }()
	s.keySynced.Store(time.Now().UnixNano())
	keys, err := s.storedKeys(ctx)
	if err != nil {
		return err
	}
	if len(keys) == 0 {
		s.log.WarnContext(ctx, "backend: the store holds no signing key; keeping this replica's")
		return nil
	}
	before, _ := s.keys.Current()
	if err := s.keys.Replace(keys...); err != nil {
		return fmt.Errorf("backend: signing keys: %w", err)
	}
	if after, ok := s.keys.Current(); ok && after.ID != before.ID {
		s.log.InfoContext(ctx, "backend: signing key rotated elsewhere; now signing with it", "kid", after.ID, "was", before.ID)
	}
	s.prune(ctx)
	return nil
}

// syncKeysSoon syncs the signing keys unless that was done less than
// keySyncMinGap ago. A failure is logged: the set stays as it was. The gap
// is wall time, not the server's clock: it bounds load on the store.
func (s *Server) syncKeysSoon(ctx context.Context) {
	now := time.Now().UnixNano()
	last := s.keySynced.Load()
	if now-last < int64(s.keySyncGap) || !s.keySynced.CompareAndSwap(last, now) {
		return
	}
	if err := s.SyncSigningKeys(ctx); err != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "backend: reading the signing keys", "err", err)
	}
}

// syncingKeys is the backend's own KeySource: its key set, read again from
// the store (syncKeysSoon) when a ticket names a key it does not know.
type syncingKeys struct{ s *Server }

func (k syncingKeys) Key(ctx context.Context, kid string) (ed25519.PublicKey, error) {
	pub, err := k.s.keys.Key(ctx, kid)
	if errors.Is(err, auth.ErrUnknownKey) {
		k.s.syncKeysSoon(ctx)
		return k.s.keys.Key(ctx, kid)
	}
	return pub, err
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
