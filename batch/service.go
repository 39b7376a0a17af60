package batch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/internal/utf8cut"
	"ludus.dev/ludus/simnode/engine"
)

// Service serves BatchService (proto/ludus/v1/batch.proto) to studios.
type Service struct {
	Etcd    *clusterstate.Client
	Backend Backend
	// Engine checks specs against their modules at StartRun.
	Engine *engine.Engine
	// Authorize returns the caller's tenant, or a Connect error: the
	// backend's (*backend.Server).AuthorizeTenant.
	Authorize func(ctx context.Context, h http.Header, method string, write bool) (tenantID string, err error)
	// BaseURL, if set, prefixes archive links (e.g. https://api.example.com).
	BaseURL string
	// Poll is WatchRun's polling interval. Default 500 ms.
	Poll time.Duration
	// Logger gets internal errors; slog.Default() if nil.
	Logger *slog.Logger
}

var _ ludusv1connect.BatchServiceHandler = (*Service)(nil)

// Handler returns the service's path and handler.
func (s *Service) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return ludusv1connect.NewBatchServiceHandler(s, opts...)
}

// DefaultLinkTTL and MaxLinkTTL bound archive links.
const (
	DefaultLinkTTL = 12 * time.Hour
	MaxLinkTTL     = 7 * 24 * time.Hour
)

// errorOf maps batch and clusterstate errors to Connect errors, in one place.
func (s *Service) errorOf(ctx context.Context, op string, err error) error {
	var ce *connect.Error
	var capErr *clusterstate.BatchCapError
	switch {
	case errors.As(err, &ce):
		return err
	case errors.As(err, &capErr):
		return connect.NewError(connect.CodeResourceExhausted, capErr)
	case errors.Is(err, clusterstate.ErrTooManyBatchRuns):
		return connect.NewError(connect.CodeResourceExhausted, errors.New(strings.TrimPrefix(err.Error(), clusterstate.ErrTooManyBatchRuns.Error()+": ")))
	case errors.Is(err, ErrInvalidSpec):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, clusterstate.ErrBatchRunNotFound), errors.Is(err, store.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, errors.New("no such batch run"))
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	log.ErrorContext(ctx, "batch: "+op, "err", err)
	return connect.NewError(connect.CodeInternal, errors.New("internal error"))
}

// SpecFromProto converts a spec from the API.
func SpecFromProto(p *ludusv1.BatchRunSpec) Spec {
	s := Spec{Module: p.GetModule(), BuildID: p.GetBuildId(), Seeds: p.GetSeeds(), Sides: int(p.GetSides()),
		Games: int(p.GetGames()), GameTicks: p.GetGameDeadlineTicks(), Deadline: time.Duration(p.GetDeadlineS()) * time.Second,
		Budget: time.Duration(p.GetBudgetCpuS() * float64(time.Second)), KeepLogs: p.GetKeepLogs()}
	if p.GetDeadlineS() > int64(MaxDeadline/time.Second) {
		s.Deadline = MaxDeadline + time.Second // refused by Check with the limit
	}
	for _, m := range p.GetMaps() {
		s.Maps = append(s.Maps, Map{Name: m.GetName(), Config: json.RawMessage(m.GetConfigJson())})
	}
	return s
}

func specToProto(s Spec) *ludusv1.BatchRunSpec {
	p := &ludusv1.BatchRunSpec{Module: s.Module, BuildId: s.BuildID, Seeds: s.Seeds, Sides: int32(s.Sides), Games: int32(s.Games),
		GameDeadlineTicks: s.GameTicks, DeadlineS: int64(s.Deadline / time.Second), BudgetCpuS: s.Budget.Seconds(), KeepLogs: s.KeepLogs}
	for _, m := range s.Maps {
		p.Maps = append(p.Maps, &ludusv1.BatchMap{Name: m.Name, ConfigJson: string(m.Config)})
	}
	return p
}

// progressProto describes a run at now.
func progressProto(r clusterstate.BatchRun, p clusterstate.BatchProgress, now time.Time) *ludusv1.BatchProgress {
	var spec Spec
	_ = json.Unmarshal(r.Spec, &spec)
	out := &ludusv1.BatchProgress{RunId: r.ID, State: r.State, Reason: r.Reason, Games: int32(r.Games), Done: int32(p.Done),
		Failed: int32(p.Failed), TimedOut: int32(p.TimedOut), CpuS: float64(p.CPU) / 1e9, BudgetCpuS: float64(r.BudgetCPU) / 1e9,
		CreatedAt: timestamppb.New(r.CreatedAt), Deadline: timestamppb.New(r.Deadline), Spec: specToProto(spec)}
	end := now
	if !r.EndedAt.IsZero() {
		out.EndedAt = timestamppb.New(r.EndedAt)
		end = r.EndedAt
	}
	if wall := end.Sub(r.CreatedAt).Seconds(); wall > 0 && spec.TickRate > 0 {
		out.Speedup = float64(p.Ticks) / float64(spec.TickRate) / wall
	}
	return out
}

func resultProto(r store.BatchResult) *ludusv1.BatchResult {
	return &ludusv1.BatchResult{Game: int32(r.Game), Map: r.Map, Seed: r.Seed, Side: int32(r.Side), Winner: int32(r.Winner),
		Ticks: r.Ticks, Ended: r.Ended, TimedOut: r.TimedOut, CpuS: float64(r.CPUNanos) / 1e9, ResultJson: string(r.Result), Error: r.Error}
}

// run reads a run of tenant: from etcd, or from the backend once etcd forgot it.
func (s *Service) run(ctx context.Context, tenant, id string) (clusterstate.BatchRun, clusterstate.BatchProgress, error) {
	if !clusterstate.ValidID(id) {
		return clusterstate.BatchRun{}, clusterstate.BatchProgress{}, connect.NewError(connect.CodeInvalidArgument, errors.New("run_id must be 1..64 characters of [A-Za-z0-9_-]"))
	}
	r, p, err := s.Etcd.BatchRunProgress(ctx, tenant, id)
	if errors.Is(err, clusterstate.ErrBatchRunNotFound) {
		rec, err := s.Backend.BatchRun(ctx, tenant, id)
		if err != nil {
			return r, p, err
		}
		r, p = runFromStore(rec)
		return r, p, nil
	}
	return r, p, err
}

// StartRun implements ludusv1connect.BatchServiceHandler.
func (s *Service) StartRun(ctx context.Context, req *connect.Request[ludusv1.StartRunRequest]) (*connect.Response[ludusv1.StartRunResponse], error) {
	tenant, err := s.Authorize(ctx, req.Header(), "StartRun", true)
	if err != nil {
		return nil, err
	}
	if req.Msg.Spec == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("spec is required"))
	}
	a := &Admitter{Etcd: s.Etcd, Backend: s.Backend, Engine: s.Engine}
	r, err := a.Admit(ctx, tenant, SpecFromProto(req.Msg.Spec))
	if err != nil {
		return nil, s.errorOf(ctx, "start run", err)
	}
	return connect.NewResponse(&ludusv1.StartRunResponse{Progress: progressProto(r, clusterstate.BatchProgress{}, time.Now())}), nil
}

// GetRun implements ludusv1connect.BatchServiceHandler.
func (s *Service) GetRun(ctx context.Context, req *connect.Request[ludusv1.GetRunRequest]) (*connect.Response[ludusv1.GetRunResponse], error) {
	tenant, err := s.Authorize(ctx, req.Header(), "GetRun", false)
	if err != nil {
		return nil, err
	}
	r, p, err := s.run(ctx, tenant, req.Msg.RunId)
	if err != nil {
		return nil, s.errorOf(ctx, "get run", err)
	}
	resp := &ludusv1.GetRunResponse{Progress: progressProto(r, p, time.Now())}
	if req.Msg.Results {
		q := store.BatchResultQuery{Limit: pageSize, MaxBytes: pageBytes}
		switch n := req.Msg.PageSize; {
		case n < 0 || n > pageSize:
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("page_size is %d: a page holds 1..%d results (0 for %d)", n, pageSize, pageSize))
		case n > 0:
			q.Limit = int(n)
		}
		if q.FromGame, err = pageStart(req.Msg.PageToken); err != nil {
			return nil, err
		}
		rs, more, err := s.Backend.BatchResults(ctx, tenant, r.ID, q)
		if err != nil {
			return nil, s.errorOf(ctx, "get run results", err)
		}
		for _, x := range rs {
			resp.Results = append(resp.Results, resultProto(x))
		}
		if more && len(rs) > 0 {
			resp.NextPageToken = pageToken(rs[len(rs)-1].Game + 1)
		}
	}
	return connect.NewResponse(resp), nil
}

// A page of results (GetRun's, and each WatchRun message's) holds at most
// pageSize results and about pageBytes of their JSON: a run has up to
// 100,000 results of up to 1 MiB each, and gRPC clients refuse messages over
// 4 MiB by default.
const (
	pageSize  = store.MaxBatchResultPage
	pageBytes = 2 << 20
)

// pageToken is GetRun's next_page_token: where the next page starts. It is
// opaque to clients ("g" and the game number), so its form may change.
func pageToken(fromGame int) string { return "g" + strconv.Itoa(fromGame) }

// pageStart parses a page token ("" is the first page).
func pageStart(token string) (int, error) {
	if token == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimPrefix(token, "g"))
	if !strings.HasPrefix(token, "g") || err != nil || n < 0 || n > MaxGames {
		return 0, connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("page_token %q is not one GetRun gave: pass next_page_token as it came, or none for the first page", utf8cut.Cut(token, 40)))
	}
	return n, nil
}

// WatchRun implements ludusv1connect.BatchServiceHandler. It polls: the
// run's progress from etcd and its new results from the backend, re-reading
// a window of two seconds before the newest result seen (a result committed
// late with an earlier time is still found) and sending each game once. New
// results are read and sent a page at a time, each page a message.
func (s *Service) WatchRun(ctx context.Context, req *connect.Request[ludusv1.WatchRunRequest], stream *connect.ServerStream[ludusv1.WatchRunResponse]) error {
	tenant, err := s.Authorize(ctx, req.Header(), "WatchRun", false)
	if err != nil {
		return err
	}
	poll := s.Poll
	if poll <= 0 {
		poll = 500 * time.Millisecond
	}
	const window = 2 * time.Second
	var sent []bool // by game
	var since time.Time
	lastDone := -1
	for {
		r, p, err := s.run(ctx, tenant, req.Msg.RunId)
		if err != nil {
			return s.errorOf(ctx, "watch run", err)
		}
		progress := progressProto(r, p, time.Now())
		if sent == nil {
			sent = make([]bool, r.Games)
		}
		msg := &ludusv1.WatchRunResponse{Progress: progress}
		if p.Done != lastDone || r.State == clusterstate.BatchEnded {
			q := store.BatchResultQuery{Since: since, Limit: pageSize, MaxBytes: pageBytes}
			if r.State == clusterstate.BatchEnded {
				// The last pass reads every result: a result's stored_at
				// is taken before its transaction commits, which under
				// load (a group commit waiting on locks) may be later
				// than the window allows for.
				q.Since = time.Time{}
			}
			newest := since
			for {
				rs, more, err := s.Backend.BatchResults(ctx, tenant, r.ID, q)
				if err != nil {
					return s.errorOf(ctx, "watch run results", err)
				}
				for _, x := range rs {
					if x.StoredAt.Add(-window).After(newest) {
						newest = x.StoredAt.Add(-window)
					}
					if x.Game < 0 || x.Game >= len(sent) || sent[x.Game] {
						continue
					}
					sent[x.Game] = true
					msg.Results = append(msg.Results, resultProto(x))
				}
				if !more || len(rs) == 0 {
					break
				}
				if len(msg.Results) > 0 { // a full page: send it, read on
					if err := stream.Send(msg); err != nil {
						return err
					}
					msg = &ludusv1.WatchRunResponse{Progress: progress}
				}
				q.FromGame = rs[len(rs)-1].Game + 1
			}
			since = newest
			lastDone = p.Done
		}
		if err := stream.Send(msg); err != nil {
			return err
		}
		if r.State == clusterstate.BatchEnded {
			return nil
		}
		select {
		case <-ctx.Done():
			return s.errorOf(ctx, "watch run", ctx.Err())
		case <-time.After(poll):
		}
	}
}

// CancelRun implements ludusv1connect.BatchServiceHandler.
func (s *Service) CancelRun(ctx context.Context, req *connect.Request[ludusv1.CancelRunRequest]) (*connect.Response[ludusv1.CancelRunResponse], error) {
	tenant, err := s.Authorize(ctx, req.Header(), "CancelRun", true)
	if err != nil {
		return nil, err
	}
	if _, _, err := s.run(ctx, tenant, req.Msg.RunId); err != nil {
		return nil, s.errorOf(ctx, "cancel run", err)
	}
	if err := endRun(ctx, s.Etcd, s.Backend, tenant, req.Msg.RunId, clusterstate.BatchCanceled); err != nil && !errors.Is(err, clusterstate.ErrBatchRunNotFound) {
		return nil, s.errorOf(ctx, "cancel run", err)
	}
	r, p, err := s.run(ctx, tenant, req.Msg.RunId)
	if err != nil {
		return nil, s.errorOf(ctx, "cancel run", err)
	}
	return connect.NewResponse(&ludusv1.CancelRunResponse{Progress: progressProto(r, p, time.Now())}), nil
}

// RunArchiveLink implements ludusv1connect.BatchServiceHandler.
func (s *Service) RunArchiveLink(ctx context.Context, req *connect.Request[ludusv1.RunArchiveLinkRequest]) (*connect.Response[ludusv1.RunArchiveLinkResponse], error) {
	tenant, err := s.Authorize(ctx, req.Header(), "RunArchiveLink", false)
	if err != nil {
		return nil, err
	}
	ttl := time.Duration(req.Msg.TtlS) * time.Second
	switch {
	case req.Msg.TtlS < 0 || ttl > MaxLinkTTL:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("ttl_s must be 0..%d", int64(MaxLinkTTL/time.Second)))
	case ttl == 0:
		ttl = DefaultLinkTTL
	}
	if _, _, err := s.run(ctx, tenant, req.Msg.RunId); err != nil {
		return nil, s.errorOf(ctx, "archive link", err)
	}
	path, exp, err := s.Backend.BatchArchiveLink(ctx, tenant, req.Msg.RunId, ttl)
	if err != nil {
		return nil, s.errorOf(ctx, "archive link", err)
	}
	return connect.NewResponse(&ludusv1.RunArchiveLinkResponse{Url: strings.TrimSuffix(s.BaseURL, "/") + path, ExpiresAt: timestamppb.New(exp)}), nil
}

// RotateArchiveLinkKey implements ludusv1connect.BatchServiceHandler.
func (s *Service) RotateArchiveLinkKey(ctx context.Context, req *connect.Request[ludusv1.RotateArchiveLinkKeyRequest]) (*connect.Response[ludusv1.RotateArchiveLinkKeyResponse], error) {
	tenant, err := s.Authorize(ctx, req.Header(), "RotateArchiveLinkKey", true)
	if err != nil {
		return nil, err
	}
	if err := s.Backend.RotateBatchLinkKey(ctx, tenant); err != nil {
		return nil, s.errorOf(ctx, "rotate link key", err)
	}
	return connect.NewResponse(&ludusv1.RotateArchiveLinkKeyResponse{}), nil
}
