package backend_test

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	"ludus.dev/ludus/auth/clustercred"
	"ludus.dev/ludus/backend"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

func nodeCred(t *testing.T, token, nodeID string) string {
	t.Helper()
	c, err := clustercred.Node(token, nodeID)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestNodeCredentialRoles: a sim node's own credential fetches modules and
// archives games, and can neither mint a match credential nor put accounts
// on a roster; the cluster token can do everything, as before.
func TestNodeCredentialRoles(t *testing.T) {
	e := newEnv(t)
	tn, admin := e.createTenant("roles")
	up, err := e.admin.UploadModule(ctx, req(&ludusv1.UploadModuleRequest{Name: "arena", Wasm: wasm("arena")}, admin))
	if err != nil {
		t.Fatal(err)
	}
	acc, err := e.admin.CreateAccount(ctx, req(&ludusv1.CreateAccountRequest{CustomId: "p1"}, admin))
	if err != nil {
		t.Fatal(err)
	}
	node := nodeCred(t, clusterToken, "simnode-1")

	// What a node needs.
	res, err := e.modules.ResolveModule(ctx, req(&clusterv1.ResolveModuleRequest{TenantId: tn.Id, Name: "arena"}, node))
	if err != nil || res.Msg.Module.BuildId != up.Msg.Module.BuildId {
		t.Fatalf("ResolveModule with a node credential: %v, %v", res, err)
	}
	got, err := e.modules.GetModule(ctx, req(&clusterv1.GetModuleRequest{TenantId: tn.Id, BuildId: up.Msg.Module.BuildId}, node))
	if err != nil || string(got.Msg.Wasm) != string(wasm("arena")) {
		t.Fatalf("GetModule with a node credential: %v", err)
	}
	if err := backend.NewArchiveClient(e.http.Client(), e.http.URL, node).Archive(ctx,
		&clusterv1.ArchiveGameRequest{TenantId: tn.Id, GameId: "g-node", SpecJson: []byte(`{}`), State: "ended"}); err != nil {
		t.Fatalf("ArchiveGame with a node credential: %v", err)
	}
	if !strings.Contains(e.logs.String(), "node=simnode-1") {
		t.Errorf("the archive's log line does not name the node:\n%s", e.logs.String())
	}

	// What only a gateway may do.
	_, err = e.modules.MintMatchCredential(ctx, req(&clusterv1.MintMatchCredentialRequest{TenantId: tn.Id, MatchId: "m-1", Game: "arena"}, node))
	wantCode(t, err, connect.CodePermissionDenied, "MintMatchCredential needs the cluster token", `"simnode-1"`)
	cred := e.mint(tn.Id, "m-1", "arena") // the refused call registered nothing
	_, err = e.modules.AddMatchPlayers(ctx, req(&clusterv1.AddMatchPlayersRequest{TenantId: tn.Id, MatchId: "m-1", AccountIds: []string{acc.Msg.Account.Id}}, node))
	wantCode(t, err, connect.CodePermissionDenied, "AddMatchPlayers needs the cluster token")
	// RosterClient does not retry a refusal.
	err = backend.NewRosterClient(e.http.Client(), e.http.URL, node).AddPlayers(ctx, tn.Id, "m-1", acc.Msg.Account.Id)
	wantCode(t, err, connect.CodePermissionDenied, "AddMatchPlayers")
	if r, err := e.store.MatchRoster(ctx, tn.Id, "m-1"); err != nil || len(r) != 0 {
		t.Fatalf("roster after refused calls: %v, %v", r, err)
	}
	// A match credential is no cluster credential either.
	_, err = e.modules.ResolveModule(ctx, req(&clusterv1.ResolveModuleRequest{TenantId: tn.Id, Name: "arena"}, cred))
	wantCode(t, err, connect.CodeUnauthenticated, "wrong cluster token or node credential")

	// The cluster token (gateways; nodes not yet given a node credential).
	e.mint(tn.Id, "m-2", "arena")
	if err := backend.NewRosterClient(e.http.Client(), e.http.URL, clusterToken).AddPlayers(ctx, tn.Id, "m-2", acc.Msg.Account.Id); err != nil {
		t.Fatalf("AddPlayers with the cluster token: %v", err)
	}

	// Credentials that are not this cluster's node credentials.
	gw, _ := clustercred.GatewayToNode(clusterToken, "simnode-1")
	for name, bad := range map[string]string{
		"another cluster's node credential": nodeCred(t, "another-cluster-token-01", "simnode-1"),
		"tampered node credential":          node[:len(node)-1] + map[bool]string{true: "B", false: "A"}[strings.HasSuffix(node, "A")],
		"another node's id, my MAC":         "lnd_simnode-2_" + node[len(node)-43:],
		"the gateway-to-node credential":    gw,
		"the cluster token, cut":            clusterToken[:len(clusterToken)-1],
		"an operator key":                   operatorKey,
	} {
		_, err := e.modules.GetModule(ctx, req(&clusterv1.GetModuleRequest{TenantId: tn.Id, BuildId: up.Msg.Module.BuildId}, bad))
		wantCode(t, err, connect.CodeUnauthenticated, "wrong cluster token or node credential")
		_, err = e.modules.MintMatchCredential(ctx, req(&clusterv1.MintMatchCredentialRequest{TenantId: tn.Id, MatchId: "m-bad", Game: "arena"}, bad))
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("Mint with %s: %v", name, err)
		}
	}
	_, err = e.modules.GetModule(ctx, req(&clusterv1.GetModuleRequest{TenantId: tn.Id, BuildId: up.Msg.Module.BuildId}, ""))
	wantCode(t, err, connect.CodeUnauthenticated, "missing cluster token or node credential")

	// No cluster token configured: no node credential works either.
	e2 := newEnv(t, func(c *backend.Config) { c.ClusterToken = "" })
	_, err = e2.modules.ResolveModule(ctx, req(&clusterv1.ResolveModuleRequest{TenantId: tn.Id, Name: "arena"}, nodeCred(t, "x", "simnode-1")))
	wantCode(t, err, connect.CodeUnauthenticated, "disabled")
}

// TestGetRatings: the matchmaker's read of players' ratings in a mode; the
// cluster token only; an account never rated is left out (a new player).
func TestGetRatings(t *testing.T) {
	e := newEnv(t)
	tn, admin := e.createTenant("ratings-read")
	acc, err := e.admin.CreateAccount(ctx, req(&ludusv1.CreateAccountRequest{CustomId: "rated"}, admin))
	if err != nil {
		t.Fatal(err)
	}
	id := acc.Msg.Account.Id
	got, err := e.modules.GetRatings(ctx, req(&clusterv1.GetRatingsRequest{TenantId: tn.Id, Mode: "arena", AccountIds: []string{id}}, clusterToken))
	if err != nil || len(got.Msg.Ratings) != 0 {
		t.Fatalf("an unrated account: %v, %v; want no rating", got, err)
	}
	_, err = e.modules.GetRatings(ctx, req(&clusterv1.GetRatingsRequest{TenantId: tn.Id, Mode: "arena", AccountIds: []string{id}}, nodeCred(t, clusterToken, "simnode-1")))
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("GetRatings with a node credential: %v, want PermissionDenied", err)
	}
	_, err = e.modules.GetRatings(ctx, req(&clusterv1.GetRatingsRequest{TenantId: tn.Id, Mode: "arena"}, clusterToken))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("GetRatings of no account: %v, want InvalidArgument", err)
	}
}
