package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/ops/devstack"
)

// TestServeModuleToPlayers: a player fetches the module of its tenant's games
// by build id (to render snapshots itself): immutable, content-addressed,
// hash-checked; nobody else gets it.
func TestServeModuleToPlayers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := protocols()[0]
	pl := login(t, p, devstack.DemoTenant)
	get := func(build, ticket string, hdr map[string]string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", stack.GatewayURL+"/modules/"+build+".wasm", nil)
		if ticket != "" {
			req.Header.Set("Authorization", "Bearer "+ticket)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	resp, body := get(stack.ArenaBuild, pl.ticket, nil)
	sum := sha256.Sum256(body)
	if resp.StatusCode != 200 || hex.EncodeToString(sum[:]) != stack.ArenaBuild {
		t.Fatalf("GET own module: %s, %d bytes, sha %x", resp.Status, len(body), sum)
	}
	if resp.Header.Get("Content-Type") != "application/wasm" || resp.Header.Get("ETag") != `"`+stack.ArenaBuild+`"` ||
		resp.Header.Get("Cache-Control") != "private, max-age=31536000, immutable" {
		t.Fatalf("headers %v", resp.Header)
	}
	resp, body = get(stack.ArenaBuild, pl.ticket, map[string]string{"If-None-Match": `"` + stack.ArenaBuild + `"`})
	if resp.StatusCode != http.StatusNotModified || len(body) != 0 {
		t.Fatalf("revalidation: %s with %d bytes", resp.Status, len(body))
	}

	for _, c := range []struct {
		name, build, ticket string
		want                int
	}{
		{"no ticket", stack.ArenaBuild, "", http.StatusUnauthorized},
		{"forged ticket", stack.ArenaBuild, "eyJhbGciOiJub25lIn0.e30.", http.StatusUnauthorized},
		{"not a build id", "arena", pl.ticket, http.StatusNotFound},
		{"upper-case id", "ABCDEF" + stack.ArenaBuild[6:], pl.ticket, http.StatusNotFound},
		{"path escape", "..%2f..%2fetc%2fpasswd", pl.ticket, http.StatusNotFound},
		{"unknown build", "00000000000000000000000000000000000000000000000000000000000000ff"[:64], pl.ticket, http.StatusNotFound},
	} {
		if resp, body := get(c.build, c.ticket, nil); resp.StatusCode != c.want {
			t.Errorf("%s: %s %q, want %d", c.name, resp.Status, body, c.want)
		}
	}

	// Another tenant's player cannot fetch the demo tenant's module.
	admin := ludusv1connect.NewAdminServiceClient(p.client, stack.GatewayURL, connect.WithInterceptors(withTicket(&stack.OperatorKey)))
	if _, err := admin.CreateTenant(ctx, connect.NewRequest(&ludusv1.CreateTenantRequest{Slug: "modfetch", Name: "Module Fetch"})); err != nil {
		t.Fatal(err)
	}
	other := login(t, p, "modfetch")
	if resp, _ := get(stack.ArenaBuild, other.ticket, nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("another tenant's player fetched the module: %s", resp.Status)
	}
}
