package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// heldRefresh is the fake gateway with Refresh held until release closes.
type heldRefresh struct {
	*fakeGateway
	entered, release chan struct{}
}

func (h *heldRefresh) Refresh(ctx context.Context, req *connect.Request[ludusv1.RefreshRequest]) (*connect.Response[ludusv1.RefreshResponse], error) {
	close(h.entered)
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return h.fakeGateway.Refresh(ctx, req)
}

// UseSession during a refresh of the previous account's ticket: the new
// session stays (the refresh stored the old account's ticket over it).
func TestUseSessionDuringRefresh(t *testing.T) {
	h := &heldRefresh{fakeGateway: &fakeGateway{game: arenaGame(), ticketTTL: time.Second},
		entered: make(chan struct{}), release: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle(ludusv1connect.NewAuthServiceHandler(h))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()
	c := dialFake(t, srv.URL)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	renewed := make(chan error, 1)
	go func() { _, err := c.Ticket(ctx); renewed <- err }() // the ticket expires within the margin: a refresh
	select {
	case <-h.entered:
	case <-ctx.Done():
		t.Fatal("no refresh began")
	}
	used := make(chan struct{})
	go func() {
		defer close(used)
		c.UseSession("demo", &ludusv1.Session{AccountId: "a_2", DisplayName: "other", Ticket: "ticket-other",
			RefreshToken: "refresh-other", ExpiresAt: timestamppb.New(time.Now().Add(time.Hour))})
	}()
	time.Sleep(100 * time.Millisecond) // UseSession runs (or waits) while the refresh is in flight
	close(h.release)
	if err := <-renewed; err != nil {
		t.Fatal(err)
	}
	select {
	case <-used:
	case <-ctx.Done():
		t.Fatal("UseSession did not return")
	}
	if got := c.currentTicket(); got != "ticket-other" {
		t.Fatalf("ticket %q after UseSession, want ticket-other", got)
	}
	if acc := c.Account(); acc.ID != "a_2" {
		t.Fatalf("account %+v, want a_2", acc)
	}
}
