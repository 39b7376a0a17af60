package backend

import (
	"context"
	"errors"
	"net/http"

	"buf.build/go/protovalidate"
	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"ludus.dev/ludus/backend/store"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// batchWorker implements ludus.v1.BatchWorkerService: what a batch worker
// outside the backend's process (a sim node's, package batch's
// RemoteBackend) needs of the backend — a run's module build, and storing
// each game's result before the worker acknowledges the game in etcd. A sim
// node holds neither the cluster token nor database access: it presents its
// own node credential, which the backend checks like ModuleStoreService
// does (moduleStore.cluster); the cluster token works too.
type batchWorker struct{ *Server }

var _ ludusv1connect.BatchWorkerServiceHandler = batchWorker{}

// Request limits of BatchWorkerService. PutBatchResult carries a result of
// up to 1 MiB, an input log of up to 16 MiB and an error of up to 80 KiB
// (the bounds in batch.proto); GetBatchModule only ids.
const (
	maxBatchResultRequestBytes = 18 << 20
	maxBatchModuleRequestBytes = 4 << 10
)

// mountBatchWorker serves BatchWorkerService on mux: the service with the
// small limit, PutBatchResult again with the result limit (the longer pattern
// wins), so an unauthenticated caller cannot make the backend buffer 18 MiB
// for a call that takes ids.
func (s *Server) mountBatchWorker(mux *http.ServeMux, common []connect.HandlerOption) {
	limit := func(n int) []connect.HandlerOption {
		return append([]connect.HandlerOption{connect.WithReadMaxBytes(n)}, common...)
	}
	mux.Handle(ludusv1connect.NewBatchWorkerServiceHandler(batchWorker{s}, limit(maxBatchModuleRequestBytes)...))
	_, put := ludusv1connect.NewBatchWorkerServiceHandler(batchWorker{s}, limit(maxBatchResultRequestBytes)...)
	mux.Handle(ludusv1connect.BatchWorkerServicePutBatchResultProcedure, put)
}

// authorize authenticates a call (Unauthenticated for a missing or wrong
// credential) and then checks the request against the rules in batch.proto
// (InvalidArgument), in that order: a caller without a credential learns
// nothing about the request's shape. It returns the calling node's id, ""
// for the cluster token.
func (s batchWorker) authorize(h http.Header, method string, msg proto.Message) (string, error) {
	node, err := (&moduleStore{s.Server}).cluster(h, method, nodesAllowed)
	if err != nil {
		return "", err
	}
	if err := protovalidate.Validate(msg); err != nil {
		var verr *protovalidate.ValidationError
		if errors.As(err, &verr) {
			return "", invalidArg(err)
		}
		return "", connect.NewError(connect.CodeInternal, err)
	}
	return node, nil
}

// GetBatchModule returns a module build of a tenant (Server.BatchModule).
func (s batchWorker) GetBatchModule(ctx context.Context, req *connect.Request[ludusv1.GetBatchModuleRequest]) (*connect.Response[ludusv1.GetBatchModuleResponse], error) {
	if _, err := s.authorize(req.Header(), "GetBatchModule", req.Msg); err != nil {
		return nil, err
	}
	build, wasm, err := s.BatchModule(ctx, req.Msg.TenantId, req.Msg.Module, req.Msg.BuildId)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&ludusv1.GetBatchModuleResponse{BuildId: build, Wasm: wasm}), nil
}

// PutBatchResult stores a game's result (Server.PutBatchResult: the run
// exists and is running, the game is one of its games, the first result
// wins). With a node credential the result names the node as its worker:
// what it records is what the credential proves.
func (s batchWorker) PutBatchResult(ctx context.Context, req *connect.Request[ludusv1.PutBatchResultRequest]) (*connect.Response[ludusv1.PutBatchResultResponse], error) {
	node, err := s.authorize(req.Header(), "PutBatchResult", req.Msg)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	worker := m.Worker
	if node != "" {
		worker = node
	}
	stored, err := s.Server.PutBatchResult(ctx, store.BatchResult{TenantID: m.TenantId, RunID: m.RunId, Game: int(m.Game),
		Map: m.Map, Seed: m.Seed, Side: int(m.Side), Winner: int(m.Winner), Ticks: m.Ticks, Ended: m.Ended, TimedOut: m.TimedOut,
		CPUNanos: m.CpuNs, Result: m.ResultJson, Log: m.Log, Error: m.Error, Worker: worker})
	if err != nil {
		return nil, err
	}
	if !stored {
		s.log.DebugContext(ctx, "backend: batch result seen before", "run", m.RunId, "game", m.Game, "worker", worker)
	}
	return connect.NewResponse(&ludusv1.PutBatchResultResponse{Stored: stored}), nil
}
