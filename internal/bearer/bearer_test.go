package bearer_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/emptypb"

	"ludus.dev/ludus/internal/bearer"
)

func header(v string) http.Header {
	h := http.Header{}
	if v != "" {
		h.Set("Authorization", v)
	}
	return h
}

func TestFromHeader(t *testing.T) {
	for in, want := range map[string]string{
		"Bearer abc":      "abc",
		"bearer abc":      "abc",
		"BEARER  abc  ":   "abc",
		"Bearer a b":      "a b",
		"Bearer lnd_x_yz": "lnd_x_yz",
	} {
		if got, ok := bearer.FromHeader(header(in)); !ok || got != want {
			t.Errorf("FromHeader(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "Bearer", "Bearer ", "Bearer    ", "Basic abc", "Bearerabc", "Token abc", "abc"} {
		if got, ok := bearer.FromHeader(header(in)); ok || got != "" {
			t.Errorf("FromHeader(%q) = %q, %v; want none", in, got, ok)
		}
	}
}

func TestMatchesAndCheck(t *testing.T) {
	a, b := bearer.HashOf("secret-a-0123456789"), bearer.HashOf("secret-b-0123456789")
	if !bearer.Matches("secret-a-0123456789", &a) {
		t.Fatal("Matches refuses the secret itself")
	}
	for _, tok := range []string{"", "secret-a-012345678", "secret-a-0123456789 ", "Secret-a-0123456789", "secret-b-0123456789"} {
		if bearer.Matches(tok, &a) {
			t.Errorf("Matches(%q) against a", tok)
		}
	}
	if bearer.Matches("", nil) || bearer.Matches("secret-a-0123456789", nil) {
		t.Fatal("a nil hash matches")
	}
	for _, c := range []struct {
		header string
		want   []*[32]byte
		err    error
	}{
		{"Bearer secret-a-0123456789", []*[32]byte{&a}, nil},
		{"Bearer secret-b-0123456789", []*[32]byte{&a, &b}, nil},
		{"Bearer secret-b-0123456789", []*[32]byte{nil, &b}, nil},
		{"Bearer secret-b-0123456789", []*[32]byte{&a}, bearer.ErrWrong},
		{"Bearer secret-a-0123456789", nil, bearer.ErrWrong},
		{"Bearer secret-a-0123456789", []*[32]byte{nil}, bearer.ErrWrong},
		{"", []*[32]byte{&a}, bearer.ErrMissing},
		{"Basic secret-a-0123456789", []*[32]byte{&a}, bearer.ErrMissing},
		{"Bearer ", []*[32]byte{&a}, bearer.ErrMissing},
	} {
		if err := bearer.Check(header(c.header), c.want...); !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("Check(%q, %d hashes) = %v, want %v", c.header, len(c.want), err, c.err)
		}
	}
	if bearer.ErrMissing.Error() != "bearer: missing credential" || bearer.ErrWrong.Error() != "bearer: wrong credential" {
		t.Fatal("sentinel texts changed")
	}
}

// TestTokenSends checks the client side over a real loopback server: the
// header a Token sends is what FromHeader reads; an empty Token sends none.
func TestTokenSends(t *testing.T) {
	got := make(chan string, 1)
	mux := http.NewServeMux()
	mux.Handle("/test.v1.Echo/Call", connect.NewUnaryHandler("/test.v1.Echo/Call",
		func(_ context.Context, r *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
			tok, _ := bearer.FromHeader(r.Header())
			got <- tok
			return connect.NewResponse(&emptypb.Empty{}), nil
		}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, tok := range []string{"lnd_simnode-1_x", ""} {
		c := connect.NewClient[emptypb.Empty, emptypb.Empty](srv.Client(), srv.URL+"/test.v1.Echo/Call",
			connect.WithInterceptors(bearer.Token(tok)))
		if _, err := c.CallUnary(context.Background(), connect.NewRequest(&emptypb.Empty{})); err != nil {
			t.Fatal(err)
		}
		if g := <-got; g != tok {
			t.Fatalf("server read %q, client sent Token(%q)", g, tok)
		}
	}
}
