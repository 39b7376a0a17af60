package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestStreamCounter(t *testing.T) {
	c := streamCounter{max: 2}
	r1, err := c.acquire("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.acquire("a"); err != nil {
		t.Fatal(err)
	}
	_, err = c.acquire("a")
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "limit is 2") {
		t.Fatalf("third stream: %v", err)
	}
	if _, err := c.acquire("b"); err != nil {
		t.Fatalf("another account is limited by a's streams: %v", err)
	}
	r1()
	r1() // releasing twice frees one slot only
	if _, err := c.acquire("a"); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if _, err := c.acquire("a"); err == nil {
		t.Fatal("double release freed two slots")
	}
	unlimited := streamCounter{max: -1}
	for range 100 {
		if _, err := unlimited.acquire("a"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestInputLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newInputLimiter(10, 5)
	l.now = func() time.Time { return now }
	for i := range 5 {
		if err := l.allow("a"); err != nil {
			t.Fatalf("burst input %d: %v", i, err)
		}
	}
	err := l.allow("a")
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "10 inputs per second") {
		t.Fatalf("over the burst: %v", err)
	}
	if err := l.allow("b"); err != nil {
		t.Fatalf("b limited by a: %v", err)
	}
	now = now.Add(100 * time.Millisecond) // one token back
	if err := l.allow("a"); err != nil {
		t.Fatal(err)
	}
	if err := l.allow("a"); err == nil {
		t.Fatal("two inputs allowed after 100 ms at 10/s")
	}
	now = now.Add(time.Hour) // idle buckets are dropped
	_ = l.allow("c")
	if len(l.buckets) != 1 {
		t.Fatalf("%d buckets after an hour, want 1", len(l.buckets))
	}
	if err := newInputLimiter(-1, 1).allow("a"); err != nil {
		t.Fatal(err)
	}
	// Its error names what it counts.
	m := newAccountLimiter("matchmaking calls", 1, 1)
	_ = m.allow("a")
	if err := m.allow("a"); err == nil || !strings.Contains(err.Error(), "matchmaking call rate limit: at most 1 matchmaking calls per second") {
		t.Fatalf("matchmaking calls over the burst: %v", err)
	}
}

func TestLimitsDefaults(t *testing.T) {
	if got := (Limits{}).withDefaults(); got != DefaultLimits {
		t.Fatalf("zero limits: %+v", got)
	}
	got := (Limits{MaxStreamsPerAccount: -1, InputsPerSecond: 5, MatchmakingCallsPerSecond: -1}).withDefaults()
	if got.MaxStreamsPerAccount != -1 || got.InputsPerSecond != 5 || got.InputBurst != DefaultLimits.InputBurst ||
		got.MatchmakingCallsPerSecond != -1 || got.MatchmakingBurst != DefaultLimits.MatchmakingBurst {
		t.Fatalf("partial limits: %+v", got)
	}
}

func TestStreamMeterCountsSkips(t *testing.T) {
	m := newMetrics(NewRegistry())
	s := m.meter("t1", kindSpectator)
	for _, tick := range []int64{10, 12, 14, 20, 22, 30} {
		s.frame(tick, 100)
	}
	// Interval 2: 14→20 skipped 2 frames, 22→30 skipped 3.
	if got := testutil.ToFloat64(m.framesSkipped.WithLabelValues("t1", kindSpectator)); got != 5 {
		t.Fatalf("skipped %v, want 5", got)
	}
	if got := testutil.ToFloat64(m.streamBytes.WithLabelValues("t1", kindSpectator)); got != 600 {
		t.Fatalf("bytes %v, want 600", got)
	}
	done := m.streamOpened("t1", kindPlay)
	if got := testutil.ToFloat64(m.activeStreams.WithLabelValues("t1", kindPlay)); got != 1 {
		t.Fatalf("active %v", got)
	}
	done()
	if got := testutil.ToFloat64(m.activeStreams.WithLabelValues("t1", kindPlay)); got != 0 {
		t.Fatalf("active after close %v", got)
	}
}

func TestNeedHTTP2(t *testing.T) {
	h := needHTTP2(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/ludus.v1.GameService/Play", nil))
	if rec.Code != http.StatusHTTPVersionNotSupported || !strings.Contains(rec.Body.String(), "needs HTTP/2") {
		t.Fatalf("HTTP/1.1: %d %q", rec.Code, rec.Body.String())
	}
	req := httptest.NewRequest("POST", "/ludus.v1.GameService/Play", nil)
	req.ProtoMajor = 2
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 204 {
		t.Fatalf("HTTP/2: %d", rec.Code)
	}
}

func TestCORS(t *testing.T) {
	h := withCORS(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Grpc-Status", "0")
	}), []string{"https://play.example.com"})
	pre := httptest.NewRequest("OPTIONS", "/ludus.v1.GameService/ListGames", nil)
	pre.Header.Set("Origin", "https://play.example.com")
	pre.Header.Set("Access-Control-Request-Method", "POST")
	pre.Header.Set("Access-Control-Request-Headers", "authorization,connect-protocol-version,content-type,x-grpc-web,x-user-agent")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, pre)
	if got := rec.Header().Get("Access-Control-Allow-Origin"); got != "https://play.example.com" {
		t.Fatalf("preflight allow-origin %q (status %d, headers %v)", got, rec.Code, rec.Header())
	}
	if got := strings.ToLower(rec.Header().Get("Access-Control-Allow-Headers")); !strings.Contains(got, "authorization") || !strings.Contains(got, "x-grpc-web") {
		t.Fatalf("preflight allow-headers %q", got)
	}
	req := httptest.NewRequest("POST", "/ludus.v1.GameService/ListGames", nil)
	req.Header.Set("Origin", "https://play.example.com")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if got := rec.Header().Get("Access-Control-Expose-Headers"); !strings.Contains(got, "Grpc-Status") || !strings.Contains(got, "Grpc-Message") {
		t.Fatalf("expose-headers %q", got)
	}
	evil := httptest.NewRequest("OPTIONS", "/ludus.v1.GameService/ListGames", nil)
	evil.Header.Set("Origin", "https://evil.example.com")
	evil.Header.Set("Access-Control-Request-Method", "POST")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, evil)
	if got := rec.Header().Get("Access-Control-Allow-Origin"); got != "" {
		t.Fatalf("other origin allowed: %q", got)
	}
}
