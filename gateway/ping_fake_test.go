package gateway

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// TestFakePingNamesTheRegion: Ping echoes the client's clock and names the
// region the gateway serves, which clients key their measured RTT by.
func TestFakePingNamesTheRegion(t *testing.T) {
	c := newFakeCluster(t, Limits{})
	resp, err := c.client(ticketAlice).Ping(context.Background(), connect.NewRequest(&ludusv1.PingRequest{ClientUnixNanos: 42}))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Msg.ClientUnixNanos != 42 || resp.Msg.ServerUnixNanos == 0 || resp.Msg.Region != "local" {
		t.Fatalf("Ping answered %+v; want the client's clock back, the server's, and region local", resp.Msg)
	}
}
