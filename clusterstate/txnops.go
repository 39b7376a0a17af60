package clusterstate

import (
	"context"
	"math"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// The group committer's transactions in etcd's own request messages.
//
// clientv3's Cmp and Op are copied on their way to the wire: Compare clones
// its Cmp, OpTxn clones every compare again and the request conversion a
// third time, each by reflection (proto.Clone), and every Op becomes a
// request message besides. In the matchmaking bench that was 4 % of the
// whole process's CPU, etcd's included, before the garbage it left. So the
// committer's transactions (tickets queued, parties joined, matches
// settled, searches ended) are built as the request messages they become,
// once, and sent as they are: nothing else holds them, and nothing changes
// them after they are built.

// cmpCreated: key's create revision is rev (0: the key does not exist).
func cmpCreated(key string, rev int64) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_CREATE, Result: pb.Compare_EQUAL,
		TargetUnion: &pb.Compare_CreateRevision{CreateRevision: rev}}
}

// cmpModified: key's mod revision is rev.
func cmpModified(key string, rev int64) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL,
		TargetUnion: &pb.Compare_ModRevision{ModRevision: rev}}
}

// cmpValue: key's value is value.
func cmpValue(key, value string) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL,
		TargetUnion: &pb.Compare_Value{Value: []byte(value)}}
}

// opPut puts value at key, bound to lease (0: none).
func opPut(key, value string, lease int64) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte(value), Lease: lease}}}
}

// opDelete deletes key.
func opDelete(key string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(key)}}}
}

// opGet reads key.
func opGet(key string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(key)}}}
}

// opGetPrefix reads every key under prefix.
func opGetPrefix(prefix string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(prefix),
		RangeEnd: []byte(clientv3.GetPrefixRangeEnd(prefix))}}}
}

// opCount counts key (0 or 1) without reading its value.
func opCount(key string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(key), CountOnly: true}}}
}

// opTxn nests a transaction.
func opTxn(cmps []*pb.Compare, then, els []*pb.RequestOp) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Compare: cmps, Success: then, Failure: els}}}
}

// txnCallOptions are clientv3's defaults for its own requests: wait for a
// connection rather than fail at once, and its message size limits.
var txnCallOptions = []grpc.CallOption{grpc.WaitForReady(true), grpc.MaxCallSendMsgSize(2 << 20), grpc.MaxCallRecvMsgSize(math.MaxInt32)}

// commitTxn sends a transaction through cli's connection (with its retry
// and authentication interceptors, as clientv3's KV does) and returns
// etcd's errors as clientv3 does (rpctypes errors, or ctx's).
func commitTxn(ctx context.Context, kv pb.KVClient, r *pb.TxnRequest) (*clientv3.TxnResponse, error) {
	resp, err := kv.Txn(ctx, r, txnCallOptions...)
	if err != nil {
		return nil, clientv3.ContextError(ctx, err)
	}
	return (*clientv3.TxnResponse)(resp), nil
}
