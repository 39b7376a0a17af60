package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/auth"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/ops/devstack"
)

// rawJWT builds a token from a header and claims, signed by sign (nil: empty signature).
func rawJWT(header, claims map[string]any, sign func(signingInput string) []byte) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	in := enc(header) + "." + enc(claims)
	var sig []byte
	if sign != nil {
		sig = sign(in)
	}
	return in + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// TestBadTicketsRefused: expired, foreign-key, alg none, HS256-with-public-key and
// tampered tickets are all refused with Unauthenticated, on unary and streaming calls.
func TestBadTicketsRefused(t *testing.T) {
	p := protocols()[0]
	good := login(t, p, devstack.DemoTenant)
	parts := strings.Split(good.ticket, ".")
	var claims map[string]any
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	_ = json.Unmarshal(payload, &claims)
	var header map[string]any
	hb, _ := base64.RawURLEncoding.DecodeString(parts[0])
	_ = json.Unmarshal(hb, &header)

	// Expired: signed with the backend's real key, issued ten minutes ago.
	past := auth.NewIssuer(stack.Backend.KeySet(), func() time.Time { return time.Now().Add(-10 * time.Minute) })
	expired, _, err := past.Issue(auth.Claims{TenantID: stack.TenantID, AccountID: good.account, TenantSlug: devstack.DemoTenant})
	if err != nil {
		t.Fatal(err)
	}
	// Another key, claiming the real key's kid.
	_, otherPriv, _ := ed25519.GenerateKey(nil)
	foreign := rawJWT(header, claims, func(in string) []byte { return ed25519.Sign(otherPriv, []byte(in)) })
	// Another key with its own kid.
	otherKey, _ := auth.GenerateKey(time.Now())
	otherSet, _ := auth.NewKeySet(nil, otherKey)
	unknownKid, _, _ := auth.NewIssuer(otherSet, nil).Issue(auth.Claims{TenantID: stack.TenantID, AccountID: good.account})
	// alg none.
	none := rawJWT(map[string]any{"alg": "none", "typ": header["typ"]}, claims, nil)
	// HS256 keyed with the public key bytes (the classic algorithm confusion).
	cur, _ := stack.Backend.KeySet().Current()
	hs := rawJWT(map[string]any{"alg": "HS256", "typ": header["typ"], "kid": header["kid"]}, claims, func(in string) []byte {
		m := hmac.New(sha256.New, cur.Public())
		m.Write([]byte(in))
		return m.Sum(nil)
	})
	// Tampered: another account in the payload, original signature.
	tc := map[string]any{}
	for k, v := range claims {
		tc[k] = v
	}
	tc["sub"] = "someone-else"
	tb, _ := json.Marshal(tc)
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString(tb) + "." + parts[2]

	cases := map[string]string{
		"expired": expired, "foreign key same kid": foreign, "unknown kid": unknownKid,
		"alg none": none, "hs256 with public key": hs, "tampered": tampered, "garbage": "not-a-jwt", "empty": "",
	}
	for name, tok := range cases {
		t.Run(name, func(t *testing.T) {
			ticket := tok
			games := ludusv1connect.NewGameServiceClient(p.client, stack.GatewayURL, connect.WithInterceptors(withTicket(&ticket)))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := games.ListGames(ctx, connect.NewRequest(&ludusv1.ListGamesRequest{}))
			wantCode(t, err, connect.CodeUnauthenticated)
			stream, err := games.StreamFrames(ctx, connect.NewRequest(&ludusv1.StreamFramesRequest{GameId: "x"}))
			if err == nil {
				for stream.Receive() {
					t.Fatal("a stream with a bad ticket delivered a message")
				}
				err = stream.Err()
			}
			wantCode(t, err, connect.CodeUnauthenticated)
		})
	}
}

// TestTenantIsolation: a player of tenant A can neither see nor join nor watch
// nor feed input to tenant B's game.
func TestTenantIsolation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := protocols()[0]
	admin := ludusv1connect.NewAdminServiceClient(p.client, stack.GatewayURL, connect.WithInterceptors(withTicket(&stack.OperatorKey)))
	slug := "rival"
	created, err := admin.CreateTenant(ctx, connect.NewRequest(&ludusv1.CreateTenantRequest{Slug: slug, Name: "Rival Studio"}))
	if err != nil {
		t.Fatal(err)
	}
	key := created.Msg.AdminKey
	tenantAdmin := ludusv1connect.NewAdminServiceClient(p.client, stack.GatewayURL, connect.WithInterceptors(withTicket(&key)), connect.WithSendMaxBytes(64<<20))
	if _, err := tenantAdmin.UploadModule(ctx, connect.NewRequest(&ludusv1.UploadModuleRequest{Name: "arena", Wasm: arenaWasm()})); err != nil {
		t.Fatal(err)
	}
	b := login(t, p, slug)
	g, err := b.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 1}))
	if err != nil {
		t.Fatal(err)
	}
	id := g.Msg.Game.GameId

	a := login(t, p, devstack.DemoTenant)
	_, err = a.games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: id}))
	wantCode(t, err, connect.CodeNotFound)
	_, err = a.games.SendInput(ctx, connect.NewRequest(&ludusv1.SendInputRequest{GameId: id, Seq: 1, Payload: []byte{1}}))
	wantCode(t, err, connect.CodeNotFound)
	spec, err := a.games.Spectate(ctx, connect.NewRequest(&ludusv1.SpectateRequest{GameId: id}))
	if err == nil {
		for spec.Receive() {
			t.Fatal("a player of another tenant received a frame")
		}
		err = spec.Err()
	}
	wantCode(t, err, connect.CodeNotFound)
	list, err := a.games.ListGames(ctx, connect.NewRequest(&ludusv1.ListGamesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range list.Msg.Games {
		if x.GameId == id {
			t.Fatal("tenant A's game list shows tenant B's game")
		}
	}
}

// TestUploadRefusesBadModules: garbage and a module missing ABI exports are
// refused with InvalidArgument and a message saying what is wrong.
func TestUploadRefusesBadModules(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := protocols()[0]
	admin := ludusv1connect.NewAdminServiceClient(p.client, stack.GatewayURL, connect.WithInterceptors(withTicket(&stack.OperatorKey)))
	created, err := admin.CreateTenant(ctx, connect.NewRequest(&ludusv1.CreateTenantRequest{Slug: "uploader", Name: "Uploader"}))
	if err != nil {
		t.Fatal(err)
	}
	key := created.Msg.AdminKey
	tenantAdmin := ludusv1connect.NewAdminServiceClient(p.client, stack.GatewayURL, connect.WithInterceptors(withTicket(&key)))
	// A well-formed module that exports nothing Ludus needs.
	empty := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	cases := []struct {
		name string
		wasm []byte
		want string
	}{
		{"garbage", []byte("MZ\x90\x00 definitely not wasm"), "not a valid WebAssembly module"},
		{"no exports", empty, "missing the required export ludus_"},
	}
	for _, tc := range cases {
		_, err := tenantAdmin.UploadModule(ctx, connect.NewRequest(&ludusv1.UploadModuleRequest{Name: "broken", Wasm: tc.wasm}))
		wantCode(t, err, connect.CodeInvalidArgument)
		if !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: error %q does not say %q", tc.name, err, tc.want)
		}
	}
	mods, err := tenantAdmin.ListModules(ctx, connect.NewRequest(&ludusv1.ListModulesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(mods.Msg.Modules) != 0 {
		t.Fatalf("refused modules were stored: %v", mods.Msg.Modules)
	}
}
