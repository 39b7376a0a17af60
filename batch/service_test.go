package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend/store"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// A run's results are read and sent a page at a time: GetRun by page token,
// WatchRun a page to a message, the archive streamed from pages. Six results
// of 700,000 bytes make pages of two (a third would pass 2 MiB).
func TestResultsComeInPages(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	tenant, key := newTenant(t)
	cli := service(t)
	adm := &Admitter{Etcd: state, Backend: srv, Engine: eng}
	run, err := adm.Admit(ctx, tenant, Spec{Module: "arena", Games: 6, Maps: []Map{{Config: json.RawMessage(longArena)}}, Budget: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const games, resultBytes = 6, 700_000
	for _, g := range []int{5, 0, 3, 1, 4, 2} { // stored out of order
		res := append(append([]byte(`"`), bytes.Repeat([]byte{'a' + byte(g)}, resultBytes-2)...), '"')
		if ok, err := srv.PutBatchResult(ctx, store.BatchResult{TenantID: tenant, RunID: run.ID, Game: g, Map: "m", Winner: -1, Result: res}); err != nil || !ok {
			t.Fatalf("put game %d: %v %v", g, ok, err)
		}
	}
	checkResult := func(what string, r *ludusv1.BatchResult) {
		t.Helper()
		if len(r.ResultJson) != resultBytes || r.ResultJson[1] != 'a'+byte(r.Game) {
			t.Errorf("%s: game %d's result is %d bytes starting %q", what, r.Game, len(r.ResultJson), r.ResultJson[:min(2, len(r.ResultJson))])
		}
	}

	// GetRun: pages of two by default, of one when asked, each game once
	// and in order, the last page without a token.
	for _, tc := range []struct {
		size  int32
		pages int
	}{{0, 3}, {1, 6}, {1000, 3}} {
		var got []int32
		token, pages := "", 0
		for {
			resp, err := cli.GetRun(ctx, withKey(&ludusv1.GetRunRequest{RunId: run.ID, Results: true, PageSize: tc.size, PageToken: token}, key))
			if err != nil {
				t.Fatalf("page size %d, page %d: %v", tc.size, pages, err)
			}
			pages++
			if n := len(resp.Msg.Results); n == 0 || n > 2 {
				t.Errorf("page size %d: a page of %d results", tc.size, n)
			}
			for _, r := range resp.Msg.Results {
				got = append(got, r.Game)
				checkResult("GetRun", r)
			}
			if token = resp.Msg.NextPageToken; token == "" || pages > games {
				break
			}
		}
		if pages != tc.pages || len(got) != games || got[0] != 0 || got[games-1] != games-1 {
			t.Errorf("page size %d: %d pages with games %v, want %d pages of games 0..5 in order", tc.size, pages, got, tc.pages)
		}
	}
	// Bad pages.
	for what, req := range map[string]*ludusv1.GetRunRequest{
		"a made-up token":      {RunId: run.ID, Results: true, PageToken: "123"},
		"a token past the end": {RunId: run.ID, Results: true, PageToken: "g100001"},
		"a negative token":     {RunId: run.ID, Results: true, PageToken: "g-1"},
		"a page too large":     {RunId: run.ID, Results: true, PageSize: 1001},
		"a negative page":      {RunId: run.ID, Results: true, PageSize: -1},
	} {
		_, err := cli.GetRun(ctx, withKey(req, key))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "page") {
			t.Errorf("%s: %v, want InvalidArgument about the page", what, err)
		}
	}

	// WatchRun: the results so far in messages of at most two, then, once
	// the run is cancelled, nothing again.
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	stream, err := cli.WatchRun(watchCtx, withKey(&ludusv1.WatchRunRequest{RunId: run.ID}, key))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int32]int{}
	cancelled := false
	for stream.Receive() {
		msg := stream.Msg()
		if len(msg.Results) > 2 {
			t.Errorf("a WatchRun message of %d results", len(msg.Results))
		}
		if msg.Progress == nil {
			t.Error("a WatchRun message without the progress")
		}
		for _, r := range msg.Results {
			seen[r.Game]++
			checkResult("WatchRun", r)
		}
		if len(seen) == games && !cancelled {
			cancelled = true
			if _, err := cli.CancelRun(ctx, withKey(&ludusv1.CancelRunRequest{RunId: run.ID}, key)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	for g := range int32(games) {
		if seen[g] != 1 {
			t.Errorf("WatchRun sent game %d %d times", g, seen[g])
		}
	}

	// The archive: every result, whole, in results.jsonl.
	link, err := cli.RunArchiveLink(ctx, withKey(&ludusv1.RunArchiveLinkRequest{RunId: run.ID}, key))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(hs.URL + link.Msg.Url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("archive: %d %s", resp.StatusCode, body)
	}
	lines := strings.Split(strings.TrimSuffix(string(untar(t, body)["results.jsonl"]), "\n"), "\n")
	if len(lines) != games {
		t.Fatalf("results.jsonl has %d lines", len(lines))
	}
	for i, l := range lines {
		var line struct {
			Game   int             `json:"game"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal([]byte(l), &line); err != nil || line.Game != i || len(line.Result) != resultBytes {
			t.Errorf("line %d: game %d, result of %d bytes, %v", i, line.Game, len(line.Result), err)
		}
	}
}

// First archive links asked for at once (the tenant has no link key yet)
// are all signed with the key that stays: none answers 403.
func TestFirstArchiveLinksAgree(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	tenant, _ := newTenant(t)
	const n = 8
	links := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			links[i], _, errs[i] = srv.BatchArchiveLink(ctx, tenant, "no-such-run", time.Hour)
		}()
	}
	wg.Wait()
	for i, u := range links {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		resp, err := http.Get(hs.URL + u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound { // signed right; the run does not exist
			t.Errorf("first link %d of %d at once: %d, want 404 (403: signed with a key another call replaced)", i, n, resp.StatusCode)
		}
	}
}
