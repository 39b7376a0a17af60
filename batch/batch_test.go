package batch

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/games/builtin"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// The same seed and config give the same result; another seed another game.
func TestRunnerIsDeterministic(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	m, err := eng.Compile(ctx, builtin.Arena)
	if err != nil {
		t.Fatal(err)
	}
	spec := &Spec{Maps: []Map{{Name: "m", Config: json.RawMessage(`{"bots":8,"time_limit_s":30}`)}}, GameTicks: 100_000, KeepLogs: true}
	var r Runner
	play := func(seed uint64) Result {
		res, err := r.Play(ctx, m, spec, Game{Seed: seed})
		if err != nil || res.Error != "" {
			t.Fatalf("seed %d: %v %s", seed, err, res.Error)
		}
		return res
	}
	a, b, c := play(42), play(42), play(43)
	if !a.Ended || a.Ticks == 0 || a.Ticks > 30*35 {
		t.Fatalf("game: ended %v after %d ticks", a.Ended, a.Ticks)
	}
	if !bytes.Equal(a.Result, b.Result) || a.Ticks != b.Ticks || a.Winner != b.Winner || !bytes.Equal(a.Log, b.Log) {
		t.Fatalf("seed 42 twice:\n%s\n%s", a.Result, b.Result)
	}
	if bytes.Equal(a.Result, c.Result) && bytes.Equal(a.Log, c.Log) {
		t.Fatalf("seeds 42 and 43 played the same game: %s", a.Result)
	}
	if a.CPU <= 0 {
		t.Errorf("CPU time %v", a.CPU)
	}
	// The game deadline stops a game that runs longer.
	spec.GameTicks = 50
	d := play(42)
	if d.Ended || !d.TimedOut || d.Ticks != 50 {
		t.Fatalf("deadline of 50 ticks: ended %v timed out %v ticks %d", d.Ended, d.TimedOut, d.Ticks)
	}
}

// A run of 20 short games end to end: admitted through BatchService, played
// by two in-process workers, watched until it ends; exactly one result per
// game, streamed as they land, and usage settled in the ledger.
func TestRunEndToEnd(t *testing.T) {
	ctx := testCtx(t, 120*time.Second)
	tenant, key := newTenant(t)
	cli := service(t)
	a, _ := startWorker(t, WorkerConfig{ID: "e2e-a", Concurrency: 1})
	b, _ := startWorker(t, WorkerConfig{ID: "e2e-b", Concurrency: 1})
	const n = 20
	start, err := cli.StartRun(ctx, withKey(&ludusv1.StartRunRequest{Spec: &ludusv1.BatchRunSpec{
		Module: "arena", Games: n, Seeds: []uint64{1, 2, 3, 4, 5},
		Maps:       []*ludusv1.BatchMap{{Name: "small", ConfigJson: shortArena}, {Name: "two", ConfigJson: `{"bots":2,"time_limit_s":5}`}},
		BudgetCpuS: 600, DeadlineS: 120,
	}}, key))
	if err != nil {
		t.Fatal(err)
	}
	run := start.Msg.Progress.RunId
	if start.Msg.Progress.Spec.BuildId == "" || start.Msg.Progress.Spec.GameDeadlineTicks != 35*DefaultGameSeconds {
		t.Fatalf("admitted spec %v", start.Msg.Progress.Spec)
	}
	stream, err := cli.WatchRun(ctx, withKey(&ludusv1.WatchRunRequest{RunId: run}, key))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int32]int{}
	var last *ludusv1.BatchProgress
	msgs := 0
	for stream.Receive() {
		msgs++
		last = stream.Msg().Progress
		for _, r := range stream.Msg().Results {
			seen[r.Game]++
			if r.Error != "" || r.Ticks == 0 || r.ResultJson == "" {
				t.Errorf("game %d: %+v", r.Game, r)
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if last.State != clusterstate.BatchEnded || last.Reason != clusterstate.BatchComplete || last.Done != n {
		t.Fatalf("final progress %+v", last)
	}
	if len(seen) != n {
		t.Fatalf("streamed %d games, want %d: %v", len(seen), n, seen)
	}
	for g, k := range seen {
		if k != 1 || g < 0 || g >= n {
			t.Errorf("game %d streamed %d times", g, k)
		}
	}
	if a.Played()+b.Played() != n || a.Played() == 0 || b.Played() == 0 {
		t.Errorf("worker a played %d, b %d; want %d between two busy workers", a.Played(), b.Played(), n)
	}
	got, err := cli.GetRun(ctx, withKey(&ludusv1.GetRunRequest{RunId: run, Results: true}, key))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Msg.Results) != n {
		t.Fatalf("GetRun: %d results", len(got.Msg.Results))
	}
	ledger, err := state.BatchLedger(ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	if ledger.Settled <= 0 || math.Abs(float64(ledger.Settled)/1e9-got.Msg.Progress.CpuS) > 1e-6 {
		t.Errorf("ledger settled %d ns, run used %.6f s", ledger.Settled, got.Msg.Progress.CpuS)
	}
	if left, _ := state.BatchItemsLeft(ctx, tenant, run); left != 0 {
		t.Errorf("%d items left in the queue", left)
	}
	rec, err := srv.BatchRun(ctx, tenant, run)
	if err != nil || rec.State != "ended" || rec.Done != n || rec.ExpiresAt.Sub(rec.EndedAt) != 7*24*time.Hour {
		t.Errorf("backend record %+v %v", rec, err)
	}
	// Another tenant cannot see the run.
	_, other := newTenant(t)
	if _, err := cli.GetRun(ctx, withKey(&ludusv1.GetRunRequest{RunId: run}, other)); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("other tenant's GetRun: %v", err)
	}
	if _, err := cli.GetRun(ctx, withKey(&ludusv1.GetRunRequest{RunId: run}, "lds_wrong")); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("GetRun with a wrong key: %v", err)
	}
}

// A worker killed mid-run (its context cancelled and its etcd client dropped
// without releasing its lease): its in-flight games come back after the
// lease's TTL and the other worker plays them; no game is lost or doubled.
func TestWorkerKilledMidRun(t *testing.T) {
	ctx := testCtx(t, 180*time.Second)
	tenant, _ := newTenant(t)
	victimCli, err := clusterstate.Dial(clusterstate.DialConfig{Endpoints: []string{etcdSrv.Endpoint}})
	if err != nil {
		t.Fatal(err)
	}
	victim, kill := startWorker(t, WorkerConfig{ID: "victim", Etcd: victimCli, Concurrency: 1, NoReaper: true})
	const n = 6
	adm := &Admitter{Etcd: state, Backend: srv, Engine: eng}
	run, err := adm.Admit(ctx, tenant, Spec{Module: "arena", Games: n, Maps: []Map{{Config: json.RawMessage(longArena)}}, Budget: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the victim holds a game, then kill it.
	var held int
	for {
		ls, err := state.BatchLeases(ctx, tenant, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		if l, ok := firstOf(ls, "victim"); ok {
			held = l
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the victim never claimed a game")
		}
		time.Sleep(5 * time.Millisecond)
	}
	victimCli.Close()
	kill()
	killedAt := time.Now()
	if ls, _ := state.BatchLeases(ctx, tenant, run.ID); ls[held].Worker != "victim" {
		t.Fatalf("game %d's lease went away with the client, before its TTL: %+v", held, ls)
	}
	survivor, _ := startWorker(t, WorkerConfig{ID: "survivor", Concurrency: 1})
	r := waitEnded(t, ctx, tenant, run.ID)
	if r.Reason != clusterstate.BatchComplete || r.Final.Done != n {
		t.Fatalf("run ended %s with %+v", r.Reason, r.Final)
	}
	results, err := allResults(ctx, srv, tenant, run.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != n {
		t.Fatalf("%d results for %d games", len(results), n)
	}
	for i, res := range results {
		if res.Game != i {
			t.Fatalf("results: game %d at %d", res.Game, i)
		}
		if res.Game == held && res.Worker != "survivor" {
			t.Errorf("game %d, held by the killed worker, was stored by %s", held, res.Worker)
		}
	}
	if victim.Played() > 1 || survivor.Played() < n-1 {
		t.Errorf("victim played %d, survivor %d", victim.Played(), survivor.Played())
	}
	if d := time.Since(killedAt); d < time.Second {
		t.Errorf("the killed worker's game came back after %v, before its 2 s lease could expire", d)
	}
}

func firstOf(ls map[int]clusterstate.BatchLease, worker string) (int, bool) {
	for n, l := range ls {
		if l.Worker == worker {
			return n, true
		}
	}
	return 0, false
}

func waitEnded(t *testing.T, ctx context.Context, tenant, run string) clusterstate.BatchRun {
	t.Helper()
	for {
		r, err := state.BatchRun(ctx, tenant, run)
		if err != nil {
			t.Fatal(err)
		}
		if r.State == clusterstate.BatchEnded {
			return r
		}
		select {
		case <-ctx.Done():
			_, p, _ := state.BatchRunProgress(context.Background(), tenant, run)
			t.Fatalf("run %s did not end: %+v", run, p)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// The run deadline and the budget end a run by themselves.
func TestDeadlineAndBudgetEndRuns(t *testing.T) {
	ctx := testCtx(t, 120*time.Second)
	tenant, _ := newTenant(t)
	_, stop := startWorker(t, WorkerConfig{ID: "limits", Concurrency: 2})
	adm := &Admitter{Etcd: state, Backend: srv, Engine: eng}
	long := []Map{{Config: json.RawMessage(longArena)}}

	dl, err := adm.Admit(ctx, tenant, Spec{Module: "arena", Games: 1000, Maps: long, Budget: time.Hour, Deadline: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r := waitEnded(t, ctx, tenant, dl.ID)
	if r.Reason != clusterstate.BatchDeadline || r.Final.Done >= 1000 {
		t.Fatalf("deadline run ended %s with %+v", r.Reason, r.Final)
	}
	if late := r.EndedAt.Sub(r.Deadline); late > 3*time.Second {
		t.Errorf("ended %v after its deadline", late)
	}

	budget := 300 * time.Millisecond
	bu, err := adm.Admit(ctx, tenant, Spec{Module: "arena", Games: 1000, Maps: long, Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	r = waitEnded(t, ctx, tenant, bu.ID)
	if r.Reason != clusterstate.BatchBudget || r.Final.CPU < int64(budget) || r.Final.Done >= 1000 {
		t.Fatalf("budget run ended %s with %+v", r.Reason, r.Final)
	}
	// The games the ends stopped are charged to their runs after the ends:
	// once the worker stopped, all are.
	stop()
	ledger, _ := state.BatchLedger(ctx, tenant)
	if ledger.Settled != mustRun(t, ctx, tenant, bu.ID).Final.CPU+mustRun(t, ctx, tenant, dl.ID).Final.CPU {
		t.Errorf("ledger %d ≠ the two runs' CPU", ledger.Settled)
	}
}

func mustRun(t *testing.T, ctx context.Context, tenant, run string) clusterstate.BatchRun {
	r, err := state.BatchRun(ctx, tenant, run)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The spend cap refuses a run whose worst case does not fit, with the numbers.
func TestSpendCapRefusesWithNumbers(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	tenant, key := newTenant(t)
	cli := service(t)
	if err := srv.SetBatchPolicy(ctx, tenant, 10*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	spec := func(budget float64) *ludusv1.StartRunRequest {
		return &ludusv1.StartRunRequest{Spec: &ludusv1.BatchRunSpec{Module: "arena", Games: 5,
			Maps: []*ludusv1.BatchMap{{ConfigJson: shortArena}}, BudgetCpuS: budget}}
	}
	// No worker runs: the first run stays running, its budget reserved.
	if _, err := cli.StartRun(ctx, withKey(spec(6), key)); err != nil {
		t.Fatal(err)
	}
	_, err := cli.StartRun(ctx, withKey(spec(5), key))
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("second run: %v, want ResourceExhausted", err)
	}
	for _, want := range []string{"settled 0.0", "accrued 0.0", "worst case 6.0", "this run's worst case 5.0", "= 11.0 CPU-seconds", "cap of 10.0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q lacks %q", err, want)
		}
	}
	if _, err := cli.StartRun(ctx, withKey(spec(4), key)); err != nil {
		t.Fatalf("a run that fits: %v", err)
	}
}

// TestLiveRunsBounded: a tenant has at most clusterstate.MaxLiveBatchRuns
// runs that have not ended; one more is ResourceExhausted saying what to do,
// and a run may start again once one is cancelled.
func TestLiveRunsBounded(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	tenant, key := newTenant(t)
	cli := service(t)
	if err := srv.SetBatchPolicy(ctx, tenant, time.Hour, 0); err != nil {
		t.Fatal(err)
	}
	start := func() (*connect.Response[ludusv1.StartRunResponse], error) {
		return cli.StartRun(ctx, withKey(&ludusv1.StartRunRequest{Spec: &ludusv1.BatchRunSpec{Module: "arena", Games: 1,
			Maps: []*ludusv1.BatchMap{{ConfigJson: shortArena}}, BudgetCpuS: 1}}, key))
	}
	// No worker runs: every run stays running.
	var first string
	for i := range clusterstate.MaxLiveBatchRuns {
		r, err := start()
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if i == 0 {
			first = r.Msg.Progress.RunId
		}
	}
	_, err := start()
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "runs that have not ended, the most it may") ||
		strings.Contains(err.Error(), "clusterstate") {
		t.Fatalf("a run past the bound: %v, want ResourceExhausted saying what to do", err)
	}
	if _, err := cli.CancelRun(ctx, withKey(&ludusv1.CancelRunRequest{RunId: first}, key)); err != nil {
		t.Fatal(err)
	}
	if _, err := start(); err != nil {
		t.Fatalf("a run after a cancellation: %v", err)
	}
}

// Bad specs get clear errors.
func TestBadSpecs(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	_, key := newTenant(t)
	cli := service(t)
	ok := func() *ludusv1.BatchRunSpec {
		return &ludusv1.BatchRunSpec{Module: "arena", Games: 3, BudgetCpuS: 1, Maps: []*ludusv1.BatchMap{{ConfigJson: shortArena}}}
	}
	cases := []struct {
		name string
		edit func(s *ludusv1.BatchRunSpec)
		code connect.Code
		want string
	}{
		{"no games", func(s *ludusv1.BatchRunSpec) { s.Games = 0 }, connect.CodeInvalidArgument, "games must be at least 1"},
		{"negative games", func(s *ludusv1.BatchRunSpec) { s.Games = -5 }, connect.CodeInvalidArgument, "games must be at least 1"},
		{"huge", func(s *ludusv1.BatchRunSpec) { s.Games = 1 << 30 }, connect.CodeInvalidArgument, "at most 100000"},
		{"no budget", func(s *ludusv1.BatchRunSpec) { s.BudgetCpuS = 0 }, connect.CodeInvalidArgument, "budget is required"},
		{"deadline too far", func(s *ludusv1.BatchRunSpec) { s.DeadlineS = 1 << 40 }, connect.CodeInvalidArgument, "run deadline"},
		{"unknown module", func(s *ludusv1.BatchRunSpec) { s.Module = "nope" }, connect.CodeNotFound, `no module named "nope"`},
		{"no module", func(s *ludusv1.BatchRunSpec) { s.Module = "" }, connect.CodeInvalidArgument, "name a module"},
		{"not JSON", func(s *ludusv1.BatchRunSpec) { s.Maps[0].ConfigJson = `{"bots":` }, connect.CodeInvalidArgument, "config is not JSON"},
		{"config refused", func(s *ludusv1.BatchRunSpec) { s.Maps[0].ConfigJson = `{"bots":"many"}` }, connect.CodeInvalidArgument, "module refused"},
		{"duplicate maps", func(s *ludusv1.BatchRunSpec) { s.Maps = append(s.Maps, &ludusv1.BatchMap{Name: "map0"}) }, connect.CodeInvalidArgument, "two maps"},
		{"bad build", func(s *ludusv1.BatchRunSpec) { s.Module, s.BuildId = "", "xyz" }, connect.CodeInvalidArgument, "build_id must be"},
	}
	for _, c := range cases {
		s := ok()
		c.edit(s)
		_, err := cli.StartRun(ctx, withKey(&ludusv1.StartRunRequest{Spec: s}, key))
		if connect.CodeOf(err) != c.code || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %v with %q", c.name, err, c.code, c.want)
		}
	}
	if _, err := cli.StartRun(ctx, withKey(&ludusv1.StartRunRequest{}, key)); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("no spec: %v", err)
	}
	if _, err := cli.GetRun(ctx, withKey(&ludusv1.GetRunRequest{RunId: "../x"}, key)); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("bad run id: %v", err)
	}
	if _, err := cli.GetRun(ctx, withKey(&ludusv1.GetRunRequest{RunId: "bnosuchrun"}, key)); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("unknown run: %v", err)
	}
}

// Trying the maps' configs has a time bound: past it the run is refused,
// naming how many maps were tried, and nothing is queued. (A fake clock that
// moves a second a reading stands for configs whose ludus_init is slow.)
func TestAdmitConfigTime(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	tenant, _ := newTenant(t)
	var clock time.Time
	adm := &Admitter{Etcd: state, Backend: srv, Engine: eng, ConfigTime: 2500 * time.Millisecond,
		Now: func() time.Time { clock = clock.Add(time.Second); return clock }}
	maps := make([]Map, 6)
	for i := range maps {
		maps[i] = Map{Name: fmt.Sprintf("m%d", i), Config: json.RawMessage(shortArena)}
	}
	_, err := adm.Admit(ctx, tenant, Spec{Module: "arena", Games: 6, Maps: maps, Budget: time.Minute})
	if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "after 2 of 6 maps") {
		t.Fatalf("slow configs: %v, want a refusal after 2 of 6 maps", err)
	}
	runs, err := state.BatchRuns(ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 0 {
		t.Fatalf("a refused admission left %d runs", len(runs))
	}
	// Within the bound, the same spec is admitted.
	adm.ConfigTime = time.Minute
	if _, err := adm.Admit(ctx, tenant, Spec{Module: "arena", Games: 6, Maps: maps, Budget: time.Minute}); err != nil {
		t.Fatalf("configs within the bound: %v", err)
	}
}

// Archive links: valid, expired, tampered, revoked by rotating the key; the
// archive holds every result and kept log; retention deletes it.
func TestArchiveLinks(t *testing.T) {
	ctx := testCtx(t, 120*time.Second)
	tenant, key := newTenant(t)
	cli := service(t)
	startWorker(t, WorkerConfig{ID: "links", Concurrency: 1})
	adm := &Admitter{Etcd: state, Backend: srv, Engine: eng}
	run, err := adm.Admit(ctx, tenant, Spec{Module: "arena", Games: 4, Maps: []Map{{Config: json.RawMessage(shortArena)}}, Budget: time.Minute, KeepLogs: true})
	if err != nil {
		t.Fatal(err)
	}
	waitEnded(t, ctx, tenant, run.ID)
	link := func(ttl int64) string {
		resp, err := cli.RunArchiveLink(ctx, withKey(&ludusv1.RunArchiveLinkRequest{RunId: run.ID, TtlS: ttl}, key))
		if err != nil {
			t.Fatal(err)
		}
		return hs.URL + resp.Msg.Url
	}
	get := func(u string) (int, []byte) {
		resp, err := http.Get(u) // no credentials
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	u := link(0)
	code, body := get(u)
	if code != http.StatusOK {
		t.Fatalf("valid link: %d %s", code, body)
	}
	files := untar(t, body)
	if lines := strings.Count(string(files["results.jsonl"]), "\n"); lines != 4 {
		t.Errorf("results.jsonl has %d lines", lines)
	}
	if len(files["logs/000003.inputlog"]) == 0 || len(files["run.json"]) == 0 {
		t.Errorf("archive files: %v", keys(files))
	}
	// Tampered: another run, another expiry, a flipped signature.
	for _, bad := range []string{
		strings.Replace(u, run.ID, run.ID[:len(run.ID)-1]+flip(run.ID[len(run.ID)-1:]), 1),
		strings.Replace(u, "exp=", "exp=9", 1),
		u[:len(u)-2] + flip(u[len(u)-2:]),
		strings.Replace(u, "sig=", "nosig=", 1),
	} {
		if code, _ := get(bad); code != http.StatusForbidden {
			t.Errorf("tampered link %s: %d", bad, code)
		}
	}
	// Expired: the backend's clock passes the expiry.
	short := link(60)
	clock.Advance(61 * time.Second)
	code, _ = get(short)
	clock.Advance(-61 * time.Second)
	if code != http.StatusGone {
		t.Errorf("expired link: %d", code)
	}
	// Revoked: rotating the key invalidates every link signed before.
	if _, err := cli.RotateArchiveLinkKey(ctx, withKey(&ludusv1.RotateArchiveLinkKeyRequest{}, key)); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(u); code != http.StatusForbidden {
		t.Errorf("link after rotation: %d", code)
	}
	if code, _ := get(link(0)); code != http.StatusOK {
		t.Errorf("new link after rotation: %d", code)
	}
	// Bad TTLs.
	if _, err := cli.RunArchiveLink(ctx, withKey(&ludusv1.RunArchiveLinkRequest{RunId: run.ID, TtlS: -1}, key)); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("negative ttl: %v", err)
	}
	// Retention: once it passes, the sweep deletes the run and its link 404s.
	u = link(int64(MaxLinkTTL / time.Second))
	clock.Advance(8 * 24 * time.Hour)
	defer clock.Advance(-8 * 24 * time.Hour)
	if n, err := srv.SweepBatchRuns(ctx); err != nil || n < 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	clock.Advance(-7 * 24 * time.Hour) // back before the link's expiry
	defer clock.Advance(7 * 24 * time.Hour)
	if code, _ := get(u); code != http.StatusNotFound {
		t.Errorf("link to a swept run: %d", code)
	}
}

// flip changes the first character of s, whatever it is (a fixed replacement
// would be no change at all when s already ends with it: a run id ending in
// "x" once made the "another run" case a valid link).
func flip(s string) string {
	if s[0] == 'A' {
		return "B" + s[1:]
	}
	return "A" + s[1:]
}

func untar(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name], _ = io.ReadAll(tr)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Wilson intervals against published values (Brown, Cai & DasGupta 2001;
// Newcombe 1998, table I: 81/263 → 0.2553–0.3662, 15/148 → 0.0624–0.1605).
func TestWilson(t *testing.T) {
	for _, c := range []struct {
		k, n   int
		lo, hi float64
	}{
		{81, 263, 0.2553, 0.3662},
		{15, 148, 0.0624, 0.1605},
		{0, 20, 0, 0.1611},
		{0, 0, 0, 1},
	} {
		lo, hi := Wilson(c.k, c.n)
		if math.Abs(lo-c.lo) > 5e-5 || math.Abs(hi-c.hi) > 5e-5 {
			t.Errorf("Wilson(%d, %d) = %.4f–%.4f, want %.4f–%.4f", c.k, c.n, lo, hi, c.lo, c.hi)
		}
	}
	s := Summarize([]Result{
		{MapName: "a", Winner: 1}, {MapName: "a", Winner: 1}, {MapName: "b", Winner: 2}, {MapName: "b", Winner: 5, Error: "trap"},
	})
	if s.Games != 4 || s.Failed != 1 || len(s.BySide) != 3 || s.BySide[0].Side != -1 || s.BySide[1].Wins != 2 || len(s.ByMap) != 6 {
		t.Fatalf("summary %+v", s)
	}
	var buf bytes.Buffer
	if err := Chart(&buf, "win rates", s.ByMap); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil || img.Bounds().Dx() < 100 {
		t.Fatalf("chart: %v", err)
	}
}
