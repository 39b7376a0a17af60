package autoscale

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// fleetState is a Source over a fixed map, recording the context it was given.
type fleetState struct {
	free map[string]Free
	err  error
	ctxs chan context.Context
}

func (s *fleetState) read(ctx context.Context) (map[string]Free, error) {
	select {
	case s.ctxs <- ctx:
	default:
	}
	return s.free, s.err
}

// startWebhook serves a Webhook over real HTTP on 127.0.0.1.
func startWebhook(t *testing.T, cfg Config) *httptest.Server {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(tWriter{t}, nil))
	}
	h, err := NewWebhook(cfg)
	if err != nil {
		t.Fatalf("NewWebhook: %v", err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// tWriter sends the webhook's log to the test's.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// review builds the JSON Agones sends (agones pkg/fleetautoscalers: the
// request, and "response": null).
func review(uid, fleet string, replicas int32) string {
	b, _ := json.Marshal(map[string]any{
		"request": map[string]any{
			"uid": uid, "name": fleet, "namespace": "ludus",
			"status": map[string]any{"replicas": replicas, "readyReplicas": replicas, "reservedReplicas": 0, "allocatedReplicas": 0},
		},
		"response": nil,
	})
	return string(b)
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func post(t *testing.T, url, contentType, body string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) answer {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, b}
}

func TestWebhookDecides(t *testing.T) {
	state := &fleetState{
		free: map[string]Free{
			"eu-west":  {Sessions: 10, Nodes: 3},     // short: scale up
			"us-east":  {Sessions: 64 * 5, Nodes: 5}, // spare: drain
			"ap-south": {Sessions: 100, Nodes: 2},    // within the band
		},
		ctxs: make(chan context.Context, 1),
	}
	srv := startWebhook(t, Config{Policy: testPolicy, Source: state.read,
		Fleets: map[string]string{"ludus-eu": "eu-west", "ludus-new": "sa-east"}})

	tests := []struct {
		name, path, fleet string
		replicas          int32
		wantScale         bool
		wantReplicas      int32
	}{
		{"fleet mapping, scale up", "/autoscale", "ludus-eu", 3, true, 4},
		{"query region wins over the mapping", "/autoscale?region=us-east", "ludus-eu", 5, true, 2},
		{"within the band: no scaling", "/autoscale?region=ap-south", "whatever", 2, false, 2},
		{"mapped region with no node yet starts MinReplicas", "/autoscale", "ludus-new", 0, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := post(t, srv.URL+tt.path, "application/json", review("uid-"+tt.fleet, tt.fleet, tt.replicas))
			if a.status != http.StatusOK {
				t.Fatalf("status %d: %s", a.status, a.body)
			}
			if ct := a.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			// Decode the way Agones does, and strictly: no field of ours it
			// would not know.
			dec := json.NewDecoder(bytes.NewReader(a.body))
			dec.DisallowUnknownFields()
			var got FleetAutoscaleReview
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("answer %s: %v", a.body, err)
			}
			if got.Response == nil {
				t.Fatalf("answer without response: %s", a.body)
			}
			want := FleetAutoscaleResponse{UID: "uid-" + tt.fleet, Scale: tt.wantScale, Replicas: tt.wantReplicas}
			if *got.Response != want {
				t.Errorf("response %+v, want %+v", *got.Response, want)
			}
			if got.Request == nil || got.Request.UID != "uid-"+tt.fleet || got.Request.Status.Replicas != tt.replicas {
				t.Errorf("the request is not echoed: %s", a.body)
			}
		})
	}
	select {
	case ctx := <-state.ctxs:
		if ctx.Done() == nil {
			t.Error("the Source got a context that never ends, not the request's")
		}
	default:
		t.Error("the Source was never called")
	}
}

// The answer's JSON keys are Agones': "request", "response", "uid", "scale",
// "replicas".
func TestWebhookWireFormat(t *testing.T) {
	srv := startWebhook(t, Config{Policy: testPolicy,
		Source: (&fleetState{free: map[string]Free{"eu": {Sessions: 0, Nodes: 1}}}).read})
	a := post(t, srv.URL+"/?region=eu", "application/json; charset=utf-8",
		`{"request":{"uid":"9f1c","name":"f","namespace":"ns","status":{"replicas":1,"readyReplicas":1,"reservedReplicas":0,"allocatedReplicas":0,"players":{"count":3,"capacity":9},"counters":{"rooms":{"allocatedCount":1,"allocatedCapacity":2,"count":3,"capacity":4}}},"labels":{"a":"b"}},"response":null}`)
	if a.status != http.StatusOK {
		t.Fatalf("status %d: %s", a.status, a.body)
	}
	var raw struct {
		Request  map[string]json.RawMessage `json:"request"`
		Response map[string]json.RawMessage `json:"response"`
	}
	if err := json.Unmarshal(a.body, &raw); err != nil {
		t.Fatal(err)
	}
	if got := string(raw.Response["uid"]) + string(raw.Response["scale"]) + string(raw.Response["replicas"]); got != `"9f1c"true2` {
		t.Errorf("response %s", a.body)
	}
	if len(raw.Response) != 3 {
		t.Errorf("response has keys beyond uid, scale, replicas: %s", a.body)
	}
	if !strings.Contains(string(raw.Request["status"]), `"players":{"count":3,"capacity":9}`) ||
		!strings.Contains(string(raw.Request["status"]), `"counters":{"rooms":{"allocatedCount":1,"allocatedCapacity":2,"count":3,"capacity":4}}`) {
		t.Errorf("the fleet status is not echoed whole: %s", raw.Request["status"])
	}
}

func TestWebhookRejects(t *testing.T) {
	srv := startWebhook(t, Config{Policy: testPolicy,
		Source: (&fleetState{free: map[string]Free{"eu": {Sessions: 50, Nodes: 2}}}).read,
		Fleets: map[string]string{"ludus-eu": "eu"}})
	ok := review("u1", "ludus-eu", 2)
	tests := []struct {
		name, method, path, contentType, body string
		status                                int
		errContains                           string
	}{
		{"GET", http.MethodGet, "/", "", "", http.StatusMethodNotAllowed, "POST"},
		{"PUT", http.MethodPut, "/", "application/json", ok, http.StatusMethodNotAllowed, "POST"},
		{"no content type", http.MethodPost, "/", "", ok, http.StatusUnsupportedMediaType, "application/json"},
		{"form content type", http.MethodPost, "/", "application/x-www-form-urlencoded", ok, http.StatusUnsupportedMediaType, "application/json"},
		{"empty body", http.MethodPost, "/", "application/json", "", http.StatusBadRequest, "not a FleetAutoscaleReview"},
		{"bad JSON", http.MethodPost, "/", "application/json", `{"request":`, http.StatusBadRequest, "not a FleetAutoscaleReview"},
		{"wrong type", http.MethodPost, "/", "application/json", `{"request":{"uid":"x","status":{"replicas":"three"}}}`, http.StatusBadRequest, "not a FleetAutoscaleReview"},
		{"two documents", http.MethodPost, "/", "application/json", ok + ok, http.StatusBadRequest, "data after the review"},
		{"trailing garbage", http.MethodPost, "/", "application/json", ok + " x", http.StatusBadRequest, "not a FleetAutoscaleReview"},
		{"no request", http.MethodPost, "/", "application/json", `{"response":null}`, http.StatusBadRequest, "request is missing"},
		{"null request", http.MethodPost, "/", "application/json", `{"request":null}`, http.StatusBadRequest, "request is missing"},
		{"no uid", http.MethodPost, "/", "application/json", review("", "ludus-eu", 2), http.StatusBadRequest, "uid is missing"},
		{"negative replicas", http.MethodPost, "/", "application/json", review("u", "ludus-eu", -1), http.StatusBadRequest, "negative"},
		{"too large", http.MethodPost, "/", "application/json",
			`{"request":{"uid":"u","name":"` + strings.Repeat("x", MaxRequestBytes) + `"}}`, http.StatusRequestEntityTooLarge, "larger than"},
		{"no region", http.MethodPost, "/", "application/json", review("u", "unmapped", 2), http.StatusBadRequest, "no region"},
		{"empty region parameter", http.MethodPost, "/?region=", "application/json", ok, http.StatusBadRequest, "region="},
		{"two region parameters", http.MethodPost, "/?region=eu&region=us", "application/json", ok, http.StatusBadRequest, "region="},
		{"misspelt region", http.MethodPost, "/?region=ue", "application/json", ok, http.StatusUnprocessableEntity, `unknown region "ue"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, tt.method, srv.URL+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			a := do(t, req)
			if a.status != tt.status {
				t.Fatalf("status %d, want %d: %s", a.status, tt.status, a.body)
			}
			var e struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal(a.body, &e); err != nil || a.header.Get("Content-Type") != "application/json" {
				t.Fatalf("error answer is not JSON (%v, %q): %s", err, a.header.Get("Content-Type"), a.body)
			}
			if !strings.Contains(e.Error, tt.errContains) {
				t.Errorf("error %q does not mention %q", e.Error, tt.errContains)
			}
			if tt.status == http.StatusMethodNotAllowed && a.header.Get("Allow") != http.MethodPost {
				t.Errorf("Allow %q", a.header.Get("Allow"))
			}
		})
	}
}

func TestWebhookSourceFails(t *testing.T) {
	srv := startWebhook(t, Config{Policy: testPolicy,
		Source: (&fleetState{err: errors.New("etcdserver: request timed out, secret detail")}).read})
	a := post(t, srv.URL+"/?region=eu", "application/json", review("u", "f", 3))
	if a.status != http.StatusServiceUnavailable {
		t.Fatalf("status %d: %s", a.status, a.body)
	}
	if bytes.Contains(a.body, []byte("secret detail")) {
		t.Errorf("the Source's error reaches the caller: %s", a.body)
	}
}

func TestNewWebhookChecksConfig(t *testing.T) {
	src := (&fleetState{}).read
	bad := []Config{
		{Policy: Policy{}, Source: src},
		{Policy: testPolicy},
		{Policy: testPolicy, Source: src, Fleets: map[string]string{"f": ""}},
		{Policy: testPolicy, Source: src, Fleets: map[string]string{"": "eu"}},
	}
	for i, cfg := range bad {
		if _, err := NewWebhook(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("config %d: NewWebhook = %v, want ErrInvalidConfig", i, err)
		}
	}
}
