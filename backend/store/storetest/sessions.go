package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"ludus.dev/ludus/backend/store"
)

// testDeviceSessionsConcurrent: concurrent guest logins (which a store may
// batch into one transaction) each get their own outcome: new devices get
// accounts, a device named by several calls gets one account, a known
// device signs in, and a call that cannot be stored (unknown tenant, an id
// taken) fails alone.
func testDeviceSessionsConcurrent(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "sessc")
	known := mustAccount(t, s, tn.ID, "dev-sessc-known000")
	const n = 48
	type out struct {
		acc     store.Account
		created bool
		err     error
	}
	outs := make([]out, n)
	calls := make([]store.Account, n)
	for i := range n {
		calls[i] = store.Account{ID: id("a_"), TenantID: tn.ID, DeviceID: fmt.Sprintf("dev-sessc-%08d", i), DisplayName: "g", CreatedAt: base, UpdatedAt: base}
	}
	calls[1].DeviceID, calls[2].DeviceID = "dev-sessc-shared00", "dev-sessc-shared00" // one device, twice
	calls[3].DeviceID = known.DeviceID                                                // signs in
	calls[4].TenantID = "t_nope"                                                      // unknown tenant
	calls[5].ID = known.ID                                                            // id taken, new device
	var wg sync.WaitGroup
	for round := range 3 { // several rounds, so batches form on whatever the timing
		for i := range n {
			a := calls[i]
			if round > 0 {
				a.ID = id("a_") // a retry of a login comes with a fresh id
				if i == 5 {
					a.ID = known.ID
				}
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				acc, created, err := s.DeviceSession(ctx, a, "", store.RefreshToken{Hash: hash(fmt.Sprintf("r-%d-%d", round, i)),
					FamilyID: id("f_"), CreatedAt: base, ExpiresAt: base.Add(1e12)})
				if round == 0 {
					outs[i] = out{acc, created, err}
				} else if err == nil && created {
					t.Errorf("round %d call %d created a second account for its device", round, i)
				}
			}()
		}
		wg.Wait()
	}
	for i, o := range outs {
		switch i {
		case 4:
			if !errors.Is(o.err, store.ErrNotFound) {
				t.Errorf("unknown tenant: %v", o.err)
			}
		case 5:
			if !errors.Is(o.err, store.ErrAlreadyExists) {
				t.Errorf("taken id: %v", o.err)
			}
		case 3:
			if o.err != nil || o.created || o.acc.ID != known.ID {
				t.Errorf("known device: %+v", o)
			}
		default:
			if o.err != nil || o.acc.DeviceID != calls[i].DeviceID || o.acc.TenantID != tn.ID {
				t.Errorf("call %d: %+v", i, o)
			}
		}
	}
	if outs[1].acc.ID != outs[2].acc.ID || outs[1].created == outs[2].created {
		t.Errorf("one device twice: %+v and %+v", outs[1], outs[2])
	}
	// Each refresh token was stored for the account its call got.
	for i := range n {
		if i == 4 || i == 5 {
			continue
		}
		var next store.RefreshToken
		next.Hash, next.CreatedAt, next.ExpiresAt = hash(fmt.Sprintf("next-%d", i)), base, base.Add(1e12)
		old, err := s.UseRefreshToken(ctx, hash(fmt.Sprintf("r-0-%d", i)), base, next)
		if err != nil || old.AccountID != outs[i].acc.ID {
			t.Errorf("refresh token of call %d: %+v, %v", i, old, err)
		}
	}
	for _, i := range []int{4, 5} {
		if _, err := s.UseRefreshToken(ctx, hash(fmt.Sprintf("r-0-%d", i)), base, store.RefreshToken{Hash: hash("x"), CreatedAt: base, ExpiresAt: base}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("refresh token of failed call %d was stored: %v", i, err)
		}
	}
}
