package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// pagedRuns answers GetRun with pages of two results of a five-game run.
type pagedRuns struct {
	ludusv1connect.UnimplementedBatchServiceHandler
	tokens []string
}

func (p *pagedRuns) GetRun(_ context.Context, req *connect.Request[ludusv1.GetRunRequest]) (*connect.Response[ludusv1.GetRunResponse], error) {
	p.tokens = append(p.tokens, req.Msg.PageToken)
	from := 0
	if t := req.Msg.PageToken; t != "" {
		if _, err := fmt.Sscanf(t, "from%d", &from); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("bad token"))
		}
	}
	resp := &ludusv1.GetRunResponse{Progress: &ludusv1.BatchProgress{RunId: req.Msg.RunId, Done: 5, Games: 5}}
	for g := from; g < min(from+2, 5); g++ {
		resp.Results = append(resp.Results, &ludusv1.BatchResult{Game: int32(g), ResultJson: `{"big":true}`})
	}
	if from+2 < 5 {
		resp.NextPageToken = fmt.Sprintf("from%d", from+2)
	}
	return connect.NewResponse(resp), nil
}

// `ludus ctl batch get` follows GetRun's pages to the last and keeps the
// results without their JSON.
func TestGetRunResultsFollowsPages(t *testing.T) {
	ctx := context.Background()
	srv := &pagedRuns{}
	mux := http.NewServeMux()
	mux.Handle(ludusv1connect.NewBatchServiceHandler(srv))
	hs := httptest.NewServer(mux)
	defer hs.Close()
	cli := ludusv1connect.NewBatchServiceClient(hs.Client(), hs.URL)
	progress, results, err := getRunResults(ctx, cli, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if progress.GetRunId() != "r1" || len(results) != 5 || fmt.Sprint(srv.tokens) != "[ from2 from4]" {
		t.Fatalf("progress %v, %d results, tokens %q", progress, len(results), srv.tokens)
	}
	for i, r := range results {
		if r.Game != int32(i) || r.ResultJson != "" {
			t.Errorf("result %d: game %d, JSON %q", i, r.Game, r.ResultJson)
		}
	}
}
