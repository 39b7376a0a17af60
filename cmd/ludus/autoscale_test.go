package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"ludus.dev/ludus/ops/autoscale"
)

// TestGatewayOperatorServesAutoscale: the gateway's operator listener answers
// Agones' webhook at /autoscale from the fleet's free sessions and exports
// them as ludus_free_sessions, next to what it served before.
func TestGatewayOperatorServesAutoscale(t *testing.T) {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	af := addAutoscaleFlags(fs)
	if err := fs.Parse([]string{"--autoscale-sessions-per-node", "10", "--autoscale-scale-up-below", "5",
		"--autoscale-drain-above", "30", "--autoscale-fleets", "ludus-eu=eu"}); err != nil {
		t.Fatal(err)
	}
	src := func(context.Context) (map[string]autoscale.Free, error) {
		return autoscale.FreeSessions([]autoscale.Load{
			{Node: "a", Region: "eu", Capacity: 10, Games: 9},
			{Node: "b", Region: "eu", Capacity: 10, Games: 8},
		}), nil
	}
	base := http.NewServeMux()
	base.HandleFunc("GET /before", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "still here") })
	reg := prometheus.NewRegistry()
	h, err := af.operatorHandler(base, reg, src, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	resp, err := http.Post(srv.URL+"/autoscale", "application/json",
		strings.NewReader(`{"request":{"uid":"u1","name":"ludus-eu","namespace":"ludus","status":{"replicas":2,"readyReplicas":2}}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var review struct {
		Response struct {
			UID      string `json:"uid"`
			Scale    bool   `json:"scale"`
			Replicas int32  `json:"replicas"`
		} `json:"response"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&review); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, decode %v", resp.StatusCode, err)
	}
	// 3 free sessions < 5: one more node of 10.
	if review.Response.UID != "u1" || !review.Response.Scale || review.Response.Replicas != 3 {
		t.Fatalf("response %+v, want uid u1, scale to 3", review.Response)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "ludus_free_sessions" && len(mf.Metric) == 1 && mf.Metric[0].GetGauge().GetValue() == 3 {
			found = true
		}
	}
	if !found {
		t.Fatal("ludus_free_sessions{region=eu} 3 is not exported")
	}
	r, err := http.Get(srv.URL + "/before")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if string(b) != "still here" {
		t.Fatalf("the operator handler's own routes are gone: %q", b)
	}
}

func TestAutoscaleFlagsRefuseNonsense(t *testing.T) {
	for _, args := range [][]string{
		{"--autoscale-fleets", "ludus-eu"},
		{"--autoscale-fleets", "=eu"},
		{"--autoscale-sessions-per-node", "0"},
		{"--autoscale-min", "5", "--autoscale-max", "2"},
		{"--autoscale-max", "4294967297"}, // wraps to 1 as an int32
		{"--autoscale-min", "-1"},
	} {
		fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
		af := addAutoscaleFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if _, err := af.operatorHandler(http.NewServeMux(), nil, func(context.Context) (map[string]autoscale.Free, error) { return nil, nil }, slog.New(slog.DiscardHandler)); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}
