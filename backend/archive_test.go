package backend_test

import (
	"bytes"
	"context"
	"testing"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

func TestGameLogArchive(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tnA, adminA := e.createTenant("arch-a")
	_, adminB := e.createTenant("arch-b")
	ac := backend.NewArchiveClient(e.http.Client(), e.http.URL, clusterToken)

	spec := []byte(`{"module":"arena","build_id":"abc","seed":42}`)
	chunks := [][]byte{{1, 2, 3, 4}, {}, bytes.Repeat([]byte{7}, 1000)}
	msg := &clusterv1.ArchiveGameRequest{TenantId: tnA.Id, GameId: "g-1", SpecJson: spec, Chunks: chunks, State: "failed",
		Message: "wasm trap: unreachable at tick 99", FinalTick: 99}
	if err := ac.Archive(ctx, msg); err != nil {
		t.Fatal(err)
	}
	if err := ac.Archive(ctx, msg); err != nil { // idempotent
		t.Fatalf("archiving twice: %v", err)
	}
	got, err := e.admin.GetGameLog(ctx, req(&ludusv1.GetGameLogRequest{GameId: "g-1"}, adminA))
	if err != nil {
		t.Fatal(err)
	}
	g := got.Msg
	if !bytes.Equal(g.SpecJson, spec) || len(g.Chunks) != 3 || !bytes.Equal(g.Chunks[0], chunks[0]) || len(g.Chunks[1]) != 0 ||
		!bytes.Equal(g.Chunks[2], chunks[2]) || g.State != "failed" || g.Message != msg.Message || g.FinalTick != 99 {
		t.Fatalf("GetGameLog = %+v", g)
	}
	ls, err := e.admin.ListArchivedGames(ctx, req(&ludusv1.ListArchivedGamesRequest{}, adminA))
	if err != nil || len(ls.Msg.Games) != 1 || ls.Msg.Games[0].GameId != "g-1" || ls.Msg.Games[0].SizeBytes != int64(len(spec)+4+1000) {
		t.Fatalf("ListArchivedGames = %v, %v", ls, err)
	}

	// Another tenant's game: NotFound, and nothing listed.
	_, err = e.admin.GetGameLog(ctx, req(&ludusv1.GetGameLogRequest{GameId: "g-1"}, adminB))
	wantCode(t, err, connect.CodeNotFound)
	if ls, err := e.admin.ListArchivedGames(ctx, req(&ludusv1.ListArchivedGamesRequest{}, adminB)); err != nil || len(ls.Msg.Games) != 0 {
		t.Fatalf("other tenant lists %v, %v", ls, err)
	}
	_, err = e.admin.GetGameLog(ctx, req(&ludusv1.GetGameLogRequest{GameId: "g-unknown"}, adminA))
	wantCode(t, err, connect.CodeNotFound)

	// Cluster token required.
	_, err = e.modules.ArchiveGame(ctx, req(msg, "wrong-token-0123456789"))
	wantCode(t, err, connect.CodeUnauthenticated)
	_, err = e.modules.ArchiveGame(ctx, req(msg, adminA))
	wantCode(t, err, connect.CodeUnauthenticated)
	// Unknown tenant.
	err = ac.Archive(ctx, &clusterv1.ArchiveGameRequest{TenantId: "t_nope", GameId: "g-1"})
	wantCode(t, err, connect.CodeNotFound)

	// More than 64 MiB: ResourceExhausted, nothing stored. The chunks share
	// one zeroed MiB, and gzip keeps the request small on the wire.
	mib := make([]byte, 1<<20)
	big := &clusterv1.ArchiveGameRequest{TenantId: tnA.Id, GameId: "g-big", SpecJson: spec}
	for range backend.MaxArchiveBytes>>20 + 1 {
		big.Chunks = append(big.Chunks, mib)
	}
	err = ac.Archive(ctx, big)
	wantCode(t, err, connect.CodeResourceExhausted)
	_, err = e.admin.GetGameLog(ctx, req(&ludusv1.GetGameLogRequest{GameId: "g-big"}, adminA))
	wantCode(t, err, connect.CodeNotFound)
}
