package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/auth/clustercred"
	"ludus.dev/ludus/games/builtin"
	"ludus.dev/ludus/gateway"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	"ludus.dev/ludus/internal/testenv"
	"ludus.dev/ludus/simnode/engine"
)

// A sim node started the way the Kubernetes manifest starts it — an
// enrollment key instead of a credential, --drain-on-term instead of a preStop
// hook holding the operator key — fetches modules with the credential it
// derived, and on the stop signal hands its game to the other node before it
// exits.
func TestSimnodeDrainsOnTerm(t *testing.T) {
	t.Setenv("LUDUS_CLUSTER_TOKEN", "")
	t.Setenv("LUDUS_NODE_CREDENTIAL", "")
	t.Setenv("LUDUS_NODE_ENROLLMENT_KEY", "")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const token = "drain-test-cluster-token"
	c := startRoleCluster(t, ctx, token, "drain")
	quiet, etcd, tenant := c.quiet, c.etcd, c.tenant
	enrollment, _ := clustercred.Enrollment(token)
	credB, _ := clustercred.Node(token, "drain-b")

	// A bad enrollment key is refused before anything starts.
	if err := runSimnode(ctx, []string{"--node-enrollment-key", "lne_short", "--id", "x"}, quiet); err == nil || !strings.Contains(err.Error(), "invalid enrollment key") {
		t.Fatalf("bad enrollment key: %v", err)
	}

	addr := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	start := func(ctx context.Context, args ...string) chan error {
		done := make(chan error, 1)
		go func() {
			done <- runSimnode(ctx, append([]string{"--etcd", c.etcdEndpoint, "--backend", c.backendURL, "--cache", testenv.WazeroCacheDir(), "--lease-ttl", "2s"}, args...), quiet)
		}()
		return done
	}
	addrA := addr()
	actx, stopA := context.WithCancel(ctx) // the signal
	defer stopA()
	doneA := start(actx, "--node-enrollment-key", enrollment, "--id", "drain-a", "--listen", addrA, "--drain-on-term", "--drain-timeout", "30s")
	bctx, stopB := context.WithCancel(ctx)
	doneB := start(bctx, "--node-credential", credB, "--id", "drain-b", "--listen", addr())
	defer func() { stopB(); <-doneB }()
	for {
		nodes, err := etcd.View().Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes) == 2 {
			break
		}
		select {
		case err := <-doneA:
			t.Fatalf("node A stopped: %v", err)
		case err := <-doneB:
			t.Fatalf("node B stopped: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}

	// A game on A: A fetches the arena from the backend with the credential
	// it derived from the enrollment key.
	toA, _ := clustercred.GatewayToNode(token, "drain-a")
	nodeA := clusterv1connect.NewNodeServiceClient(&http.Client{Transport: gateway.H2CTransport()}, "http://"+addrA)
	req := connect.NewRequest(&clusterv1.StartGameRequest{TenantId: tenant, GameId: "g-drain", ModuleName: "arena",
		BuildId: engine.BuildID(builtin.Arena), Seed: 7, Config: []byte(`{"bots":3}`)})
	req.Header().Set("Authorization", "Bearer "+toA)
	if _, err := nodeA.StartGame(ctx, req); err != nil {
		t.Fatalf("start a game on the enrolled node: %v", err)
	}
	if g, err := etcd.View().Game(ctx, tenant, "g-drain"); err != nil || g.Owner != "drain-a" {
		t.Fatalf("owner before the signal: %q %v", g.Owner, err)
	}

	// The signal: A drains, then exits by itself with no error.
	stopA()
	select {
	case err := <-doneA:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("node A exited with %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("node A did not exit after draining")
	}
	g, err := etcd.View().Game(ctx, tenant, "g-drain")
	if err != nil || g.Owner != "drain-b" || g.Status.Finished() {
		t.Fatalf("after A's drain: owner %q, status %+v, err %v; want drain-b, running", g.Owner, g.Status, err)
	}
}
