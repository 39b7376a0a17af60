package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"ludus.dev/ludus/backend/store"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// Game log archive (issue 4, item 7): when a game ends, its sim node sends
// the game's spec and full input log (ModuleStoreService.ArchiveGame, cluster
// token); `ludus ctl game replay GAME` fetches it (AdminService.GetGameLog,
// the tenant's API key).

// MaxArchiveBytes bounds an archive: spec and chunks together.
const MaxArchiveBytes = 64 << 20

// maxArchiveRequestBytes is the read limit of the cluster service: an
// archive of MaxArchiveBytes plus the framing of its fields.
const maxArchiveRequestBytes = MaxArchiveBytes + 1<<20

// Limits of an archive's fields.
const (
	MaxGameIDLen         = 128
	MaxArchiveStateLen   = 32
	MaxArchiveMessageLen = 16 << 10
	MaxArchiveChunks     = 1 << 20
)

func checkGameID(s string) error {
	if s == "" || len(s) > MaxGameIDLen || !allBytes(s, isMatchIDByte) {
		return fmt.Errorf("game_id must be 1..%d characters of A-Z, a-z, 0-9, \"_\", \"-\", \".\" and \":\", got %q", MaxGameIDLen, clip(s))
	}
	return nil
}

// cleanArchiveMessage makes a message storable whatever the sim node sends
// (a trap message must never stop a log from being archived): valid UTF-8,
// no NUL, at most MaxArchiveMessageLen bytes.
func cleanArchiveMessage(s string) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	if len(s) > MaxArchiveMessageLen {
		cut := MaxArchiveMessageLen
		for cut > 0 && !isRuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// archivedSpec is a game's spec as stored: without "match_credential", the
// secret its sim node reports results with. Every key of the tenant may read
// an archive (GetGameLog); none of them may report for a match. A spec
// without one is stored verbatim.
func archivedSpec(spec []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(spec, &m) != nil {
		return spec
	}
	if _, ok := m["match_credential"]; !ok {
		return spec
	}
	delete(m, "match_credential")
	out, err := json.Marshal(m)
	if err != nil {
		return spec
	}
	return out
}

// ArchiveGame stores an ended game's spec and input log (cluster token or a
// node credential).
func (s *moduleStore) ArchiveGame(ctx context.Context, req *connect.Request[clusterv1.ArchiveGameRequest]) (*connect.Response[clusterv1.ArchiveGameResponse], error) {
	node, err := s.cluster(req.Header(), "ArchiveGame", nodesAllowed)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	if err := checkTenantID(m.TenantId); err != nil {
		return nil, invalidArg(err)
	}
	if err := checkGameID(m.GameId); err != nil {
		return nil, invalidArg(err)
	}
	if m.State != "" {
		if err := checkText("state", m.State, MaxArchiveStateLen); err != nil {
			return nil, invalidArg(err)
		}
	}
	if m.FinalTick < 0 {
		return nil, invalidArg(errors.New("final_tick must not be negative"))
	}
	if len(m.Chunks) > MaxArchiveChunks {
		return nil, invalidArg(fmt.Errorf("at most %d chunks", MaxArchiveChunks))
	}
	size := len(m.SpecJson)
	for _, c := range m.Chunks {
		size += len(c)
	}
	if size > MaxArchiveBytes {
		return nil, connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("game log is %d bytes; the archive takes at most %d (spec and chunks together)", size, MaxArchiveBytes))
	}
	a := store.GameArchive{TenantID: m.TenantId, GameID: m.GameId, SpecJSON: archivedSpec(m.SpecJson), Chunks: m.Chunks, State: m.State,
		Message: cleanArchiveMessage(m.Message), FinalTick: m.FinalTick, ArchivedAt: s.now().UTC(),
		GuestLog: archivedGuestLog(m.GuestLog)}
	switch err := s.store.PutGameArchive(ctx, a); {
	case errors.Is(err, store.ErrNotFound):
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("unknown tenant %q", m.TenantId))
	case err != nil:
		return nil, s.internal(ctx, "archive game", err)
	}
	s.log.InfoContext(ctx, "backend: game log archived", "tenant", m.TenantId, "game", m.GameId, "chunks", len(m.Chunks), "bytes", size,
		"node", node)
	return connect.NewResponse(&clusterv1.ArchiveGameResponse{}), nil
}

// GetGameLog returns an archived game of the caller's tenant.
func (s *adminService) GetGameLog(ctx context.Context, req *connect.Request[ludusv1.GetGameLogRequest]) (*connect.Response[ludusv1.GetGameLogResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "GetGameLog", needRead)
	if err != nil {
		return nil, err
	}
	if err := checkGameID(req.Msg.GameId); err != nil {
		return nil, invalidArg(err)
	}
	a, err := s.store.GameArchive(ctx, tenantID, req.Msg.GameId)
	if errors.Is(err, store.ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no archived log of game %q", req.Msg.GameId))
	} else if err != nil {
		return nil, s.internal(ctx, "game log", err)
	}
	return connect.NewResponse(&ludusv1.GetGameLogResponse{SpecJson: a.SpecJSON, Chunks: a.Chunks, State: a.State, Message: a.Message,
		FinalTick: a.FinalTick}), nil
}

// ListArchivedGames lists the caller's tenant's archived games, newest first.
func (s *adminService) ListArchivedGames(ctx context.Context, req *connect.Request[ludusv1.ListArchivedGamesRequest]) (*connect.Response[ludusv1.ListArchivedGamesResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "ListArchivedGames", needRead)
	if err != nil {
		return nil, err
	}
	as, err := s.store.ListGameArchives(ctx, tenantID, limitOf(req.Msg.Limit, 100, 1000))
	if err != nil {
		return nil, s.internal(ctx, "list archived games", err)
	}
	out := &ludusv1.ListArchivedGamesResponse{}
	for _, a := range as {
		out.Games = append(out.Games, &ludusv1.ArchivedGame{GameId: a.GameID, State: a.State, Message: a.Message, FinalTick: a.FinalTick,
			SizeBytes: a.SizeBytes, ArchivedAt: timestamppb.New(a.ArchivedAt)})
	}
	return connect.NewResponse(out), nil
}

// ArchiveClient sends ended games' logs to the backend; a sim node makes one.
type ArchiveClient struct {
	client clusterv1connect.ModuleStoreServiceClient
	token  string
}

// NewArchiveClient returns a client of the backend at baseURL (e.g.
// "http://127.0.0.1:7100") presenting credential: the node's own credential
// (package auth/clustercred; least privilege) or the cluster token. Give hc
// no total timeout shorter than an upload of MaxArchiveBytes takes.
func NewArchiveClient(hc connect.HTTPClient, baseURL, credential string) *ArchiveClient {
	return &ArchiveClient{client: clusterv1connect.NewModuleStoreServiceClient(hc, baseURL, connect.WithSendGzip()), token: credential}
}

// Archive stores a game's log, retrying with backoff (200 ms doubling to
// 10 s) on errors worth retrying until ctx ends. Archiving twice is
// harmless: the backend keeps the last archive of a game, and the guest log
// of an earlier one when the last carries none.
func (c *ArchiveClient) Archive(ctx context.Context, req *clusterv1.ArchiveGameRequest) error {
	return retryUnary(ctx, 200*time.Millisecond, func() error {
		r := connect.NewRequest(req)
		r.Header().Set("Authorization", "Bearer "+c.token)
		_, err := c.client.ArchiveGame(ctx, r)
		return err
	})
}

// retryUnary calls f until it succeeds, fails with an error not worth
// retrying, or ctx ends; waits start at delay and double to 10 s.
func retryUnary(ctx context.Context, delay time.Duration, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		switch connect.CodeOf(err) {
		case connect.CodeUnavailable, connect.CodeInternal, connect.CodeUnknown, connect.CodeDeadlineExceeded, connect.CodeAborted:
		default:
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(2*delay, 10*time.Second)
	}
}

// MaxArchivedGuestLogBytes bounds the guest log kept with an archive: the
// newest lines that fit are kept, the others counted as dropped.
const MaxArchivedGuestLogBytes = 512 << 10

// archivedGuestLog encodes what the module printed for the archive, keeping
// the newest lines within MaxArchivedGuestLogBytes (nil: no log was sent).
func archivedGuestLog(l *ludusv1.GuestLog) []byte {
	if l == nil || (len(l.Lines) == 0 && l.Dropped == 0) {
		return nil
	}
	keep := &ludusv1.GuestLog{Lines: l.Lines, Dropped: l.Dropped}
	for {
		b, err := proto.Marshal(keep)
		if err == nil && len(b) <= MaxArchivedGuestLogBytes {
			return b
		}
		if err != nil || len(keep.Lines) == 0 {
			return nil
		}
		// Drop the oldest eighth (at least one line) and try again.
		n := max(1, len(keep.Lines)/8)
		keep.Lines = keep.Lines[n:]
		keep.Dropped += uint64(n)
	}
}
