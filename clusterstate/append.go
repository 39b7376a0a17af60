package clusterstate

import (
	"context"
	"encoding/json"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Append is one game's log append: a chunk, the game's status and optionally a
// checkpoint, fenced by the game's claim. A Final append releases the game;
// one with a Handoff gives the owner key to another node instead.
type Append struct {
	Claim Claim
	// Seq is the chunk's sequence number; Chunk its encoding (simnode/inputlog).
	Seq   uint64
	Chunk []byte
	// Status is written with the chunk.
	Status GameStatus
	// Checkpoint, if set, is written with the chunk (it ends where the chunk
	// ends); a Final append drops the game's checkpoint instead.
	Checkpoint []byte
	// Final deletes the owner key and the checkpoint: the game is over and no
	// node must take it over.
	Final bool
	// Handoff, if set, moves the owner key to another node in the same
	// transaction, so the receiver resumes exactly where this log ends.
	Handoff *Handoff
}

// Handoff is the claim an Append hands a game to: the receiving node's new
// owner value, bound to its lease.
type Handoff struct {
	To    NodeInfo
	Owner string
}

// NewHandoff returns a handoff to node to under a new claim id.
func NewHandoff(to NodeInfo) *Handoff {
	return &Handoff{To: to, Owner: NewOwnerValue(to.ID)}
}

// MaxAppendsPerTxn is how many games' appends one AppendAll may carry: a
// transaction stays within etcd's default limit of 128 compares and 128
// operations, each game costing 2 compares and up to 4 puts or deletes.
const MaxAppendsPerTxn = 24

// MaxAppendBytesPerTxn is how many bytes (Append.Size) one AppendAll may
// carry, well under etcd's default request limit of 1.5 MiB: a checkpoint
// may be 512 KiB, so three games' appends could pass it.
const MaxAppendBytesPerTxn = 1 << 20

// appendOverhead bounds what an append's request holds besides its chunk
// and checkpoint: keys, the status, the owner value, the compares.
const appendOverhead = 2 << 10

// Size bounds the bytes the append adds to a request: its chunk, its
// checkpoint, and appendOverhead for its keys and status.
func (a *Append) Size() int {
	return len(a.Chunk) + len(a.Checkpoint) + appendOverhead
}

// AppendAll commits appends of different games in one transaction (group
// commit): each game's writes are guarded by compares on its owner key's value
// and create revision, so a node that lost a game can never append to its
// log. If any compare fails nothing is written and the error is ErrClaimLost
// (commit the appends one by one to find which); other errors are etcd's, and
// the appends may or may not have committed.
func (c *Client) AppendAll(ctx context.Context, appends []Append) error {
	var cmps []clientv3.Cmp
	var ops []clientv3.Op
	for i := range appends {
		cmps = append(cmps, ownerCmps(appends[i].Claim)...)
		ops = append(ops, appendOps(&appends[i])...)
	}
	resp, err := c.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return ErrClaimLost
	}
	return nil
}

// Append commits one game's append; see AppendAll.
func (c *Client) Append(ctx context.Context, a Append) error {
	return c.AppendAll(ctx, []Append{a})
}

func appendOps(a *Append) []clientv3.Op {
	t, g := a.Claim.Tenant, a.Claim.Game
	st, _ := json.Marshal(a.Status)
	ops := []clientv3.Op{
		clientv3.OpPut(LogKey(t, g, a.Seq), string(a.Chunk)),
		clientv3.OpPut(StatusKey(t, g), string(st)),
	}
	if a.Checkpoint != nil && !a.Final {
		ops = append(ops, clientv3.OpPut(CheckpointKey(t, g), string(a.Checkpoint)))
	}
	switch {
	case a.Handoff != nil:
		ops = append(ops, clientv3.OpPut(OwnerKey(t, g), a.Handoff.Owner, clientv3.WithLease(clientv3.LeaseID(a.Handoff.To.Lease))))
	case a.Final:
		ops = append(ops, clientv3.OpDelete(OwnerKey(t, g)), clientv3.OpDelete(CheckpointKey(t, g)))
	}
	return ops
}
