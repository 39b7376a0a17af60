package simnode

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"ludus.dev/ludus/auth/clustercred"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	"ludus.dev/ludus/internal/bearer"
)

// TestNodeCredentialAdmitsOnlyItsGatewayCredential: a node started with its
// own credential (not the cluster token) answers callers presenting the
// gateway-to-node credential derived for it, and refuses the raw cluster token
// and the credential derived for another node.
func TestNodeCredentialAdmitsOnlyItsGatewayCredential(t *testing.T) {
	cred, err := clustercred.Node(testToken, "n-cred")
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(Config{ID: "n-cred", Addr: "http://127.0.0.1:1", Etcd: state, Engine: testEng, Modules: staticModules{},
		NodeCredential: cred, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	call := func(token string) error {
		c := clusterv1connect.NewNodeServiceClient(srv.Client(), srv.URL, connect.WithInterceptors(bearer.Token(token)))
		_, err := c.GetGame(context.Background(), connect.NewRequest(&clusterv1.GetGameRequest{TenantId: "t", GameId: "g"}))
		return err
	}
	mine, _ := clustercred.GatewayToNode(testToken, "n-cred")
	other, _ := clustercred.GatewayToNode(testToken, "n-other")
	// Admitted: the game does not exist, which is not an authentication error.
	if err := call(mine); connect.CodeOf(err) == connect.CodeUnauthenticated {
		t.Fatalf("its own gateway-to-node credential was refused: %v", err)
	}
	for name, token := range map[string]string{"the raw cluster token": testToken, "another node's credential": other, "its own node credential": cred, "nothing": ""} {
		if err := call(token); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("%s: err = %v, want Unauthenticated", name, err)
		}
	}
}

func TestNodeRefusesAnotherNodesCredential(t *testing.T) {
	cred, err := clustercred.Node(testToken, "n-a")
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(Config{ID: "n-b", Addr: "http://127.0.0.1:1", Etcd: state, Engine: testEng, Modules: staticModules{}, NodeCredential: cred})
	if err == nil || !strings.Contains(err.Error(), `not one for node "n-b"`) {
		t.Fatalf("New with node n-a's credential as n-b: err = %v", err)
	}
}
