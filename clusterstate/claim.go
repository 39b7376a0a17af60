package clusterstate

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Claim is one node's ownership of a game: the owner key's value (node and a
// claim id unique to this claim) and the key's create revision, the fencing
// token. Every write in the game's name compares both (Append, Reclaim, Fail).
type Claim struct {
	Tenant, Game string
	// Owner is the owner key's value, OwnerValue(node, claim id).
	Owner string
	// Fence is the owner key's create revision.
	Fence int64
}

// Node is the node id in the claim.
func (c Claim) Node() string { node, _ := ParseOwner(c.Owner); return node }

// Owner is a game's owner key as read: the claim and the lease it is bound to.
type Owner struct {
	Claim
	Lease int64
}

// newClaimID returns a random claim id.
func newClaimID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// NewOwnerValue returns the owner value of a new claim by node.
func NewOwnerValue(node string) string { return OwnerValue(node, newClaimID()) }

// ownerCmps are the fencing compares of a claim: its value and create revision.
func ownerCmps(c Claim) []clientv3.Cmp {
	k := OwnerKey(c.Tenant, c.Game)
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.Value(k), "=", c.Owner),
		clientv3.Compare(clientv3.CreateRevision(k), "=", c.Fence),
	}
}

// Claim creates a new game for node under s: its spec, its owner key (bound to
// the session's lease) and a running status, in one transaction that succeeds
// only if neither spec nor owner key exists (else ErrGameExists). The owner
// key's create revision is the claim's fencing token.
func (c *Client) Claim(ctx context.Context, s *Session, spec GameSpec, node string) (Claim, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return Claim{}, err
	}
	st, _ := json.Marshal(GameStatus{State: StateRunning, NodeID: node})
	t, id := spec.TenantID, spec.GameID
	cl := Claim{Tenant: t, Game: id, Owner: NewOwnerValue(node)}
	resp, err := c.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(GameKey(t, id)), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(OwnerKey(t, id)), "=", 0),
	).Then(
		clientv3.OpPut(GameKey(t, id), string(b)),
		clientv3.OpPut(OwnerKey(t, id), cl.Owner, clientv3.WithLease(s.lease)),
		clientv3.OpPut(StatusKey(t, id), string(st)),
	).Commit()
	if err != nil {
		return Claim{}, err
	}
	if !resp.Succeeded {
		return Claim{}, fmt.Errorf("%w: %s", ErrGameExists, id)
	}
	cl.Fence = resp.Header.Revision
	return cl, nil
}

// ClaimOrphan claims an existing game that has no owner key for node under s
// (a failover). ErrClaimed: it has an owner again, or no spec any more.
func (c *Client) ClaimOrphan(ctx context.Context, s *Session, tenant, game, node string) (Claim, error) {
	cl := Claim{Tenant: tenant, Game: game, Owner: NewOwnerValue(node)}
	k := OwnerKey(tenant, game)
	resp, err := c.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(k), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(GameKey(tenant, game)), ">", 0),
	).Then(clientv3.OpPut(k, cl.Owner, clientv3.WithLease(s.lease))).Commit()
	if err != nil {
		return Claim{}, err
	}
	if !resp.Succeeded {
		return Claim{}, fmt.Errorf("%w: %s", ErrClaimed, game)
	}
	cl.Fence = resp.Header.Revision
	return cl, nil
}

// Owner reads a game's owner key (ErrNoOwner when it has none).
func (c *Client) Owner(ctx context.Context, tenant, game string) (Owner, error) {
	resp, err := c.cli.Get(ctx, OwnerKey(tenant, game))
	if err != nil {
		return Owner{}, err
	}
	if len(resp.Kvs) == 0 {
		return Owner{}, fmt.Errorf("%w: %s", ErrNoOwner, game)
	}
	kv := resp.Kvs[0]
	return Owner{Claim: Claim{Tenant: tenant, Game: game, Owner: string(kv.Value), Fence: kv.CreateRevision}, Lease: kv.Lease}, nil
}

// Reclaim moves a claim to session s (a claim of an older lease of the same
// node, found after an outage) under a new claim id, fenced on the old claim:
// if the old claim is gone (its lease expired and another node claimed the
// game) nothing changes and the error is ErrClaimLost. The new claim keeps the
// key, so its create revision (Fence) is unchanged.
func (c *Client) Reclaim(ctx context.Context, s *Session, old Claim) (Claim, error) {
	next := old
	next.Owner = NewOwnerValue(old.Node())
	resp, err := c.cli.Txn(ctx).If(ownerCmps(old)...).
		Then(clientv3.OpPut(OwnerKey(old.Tenant, old.Game), next.Owner, clientv3.WithLease(s.lease))).Commit()
	if err != nil {
		return Claim{}, err
	}
	if !resp.Succeeded {
		return Claim{}, fmt.Errorf("%w: the old claim of %s changed before it could be re-claimed", ErrClaimLost, old.Game)
	}
	return next, nil
}

// Release gives up a claim its node cannot honour, if the owner key still has
// the claim's value, so that a live node takes the game over from its log.
// Only the value is compared: a claim id is never reused.
func (c *Client) Release(ctx context.Context, cl Claim) error {
	k := OwnerKey(cl.Tenant, cl.Game)
	_, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(k), "=", cl.Owner)).Then(clientv3.OpDelete(k)).Commit()
	return err
}

// Fail marks a game that cannot be rebuilt (a desync, or it crashed on its
// last tick) with a final status and releases it, if the owner key still has
// the claim's value.
func (c *Client) Fail(ctx context.Context, cl Claim, st GameStatus) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	k := OwnerKey(cl.Tenant, cl.Game)
	_, err = c.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(k), "=", cl.Owner)).
		Then(clientv3.OpPut(StatusKey(cl.Tenant, cl.Game), string(b)), clientv3.OpDelete(k)).Commit()
	return err
}
