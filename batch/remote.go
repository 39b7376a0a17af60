package batch

import (
	"context"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend/store"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/internal/bearer"
)

// RemoteBackend is the WorkerBackend of a worker outside the backend's
// process — a sim node's (`ludus simnode --batch-workers N`) — calling the
// backend's BatchWorkerService with the node's own credential
// (auth/clustercred), or the cluster token. It is no full Backend: such a
// worker runs with NoReaper, and the runs it ends are recorded in the backend
// by the reaper. Errors are the backend's Connect errors (NotFound for an
// unknown module or run, FailedPrecondition for a result of an ended run,
// Unauthenticated for a wrong credential), or Unavailable when it cannot be
// reached.
type RemoteBackend struct {
	client ludusv1connect.BatchWorkerServiceClient
}

var _ WorkerBackend = (*RemoteBackend)(nil)

// maxModuleResponseBytes bounds a GetBatchModule response: a module of up to
// 32 MiB (the backend's upload limit) and its build id.
const maxModuleResponseBytes = 33 << 20

// NewRemoteBackend returns a RemoteBackend calling the backend at baseURL
// (e.g. "http://127.0.0.1:8081") with credential. Give hc an HTTP/2
// transport (gateway.H2CTransport for plaintext), as the roles use between
// each other.
func NewRemoteBackend(hc connect.HTTPClient, baseURL, credential string) *RemoteBackend {
	return &RemoteBackend{client: ludusv1connect.NewBatchWorkerServiceClient(hc, baseURL,
		connect.WithInterceptors(bearer.Token(credential)), connect.WithReadMaxBytes(maxModuleResponseBytes))}
}

// BatchModule implements WorkerBackend.
func (b *RemoteBackend) BatchModule(ctx context.Context, tenantID, name, buildID string) (string, []byte, error) {
	resp, err := b.client.GetBatchModule(ctx, connect.NewRequest(&ludusv1.GetBatchModuleRequest{
		TenantId: tenantID, Module: name, BuildId: buildID}))
	if err != nil {
		return "", nil, err
	}
	return resp.Msg.BuildId, resp.Msg.Wasm, nil
}

// PutBatchResult implements WorkerBackend.
func (b *RemoteBackend) PutBatchResult(ctx context.Context, r store.BatchResult) (bool, error) {
	resp, err := b.client.PutBatchResult(ctx, connect.NewRequest(&ludusv1.PutBatchResultRequest{
		TenantId: r.TenantID, RunId: r.RunID, Game: int32(r.Game), Map: r.Map, Seed: r.Seed, Side: int32(r.Side),
		Winner: int64(r.Winner), Ticks: r.Ticks, Ended: r.Ended, TimedOut: r.TimedOut, CpuNs: r.CPUNanos,
		ResultJson: r.Result, Log: r.Log, Error: r.Error, Worker: r.Worker}))
	if err != nil {
		return false, err
	}
	return resp.Msg.Stored, nil
}
