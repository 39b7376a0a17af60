package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// fakeMatchmaker serves MatchmakingService: FindMatch runs find with the
// request; CreateParty knows the mode "arena" with teams of 2.
type fakeMatchmaker struct {
	ludusv1connect.UnimplementedMatchmakingServiceHandler

	find func(ctx context.Context, req *ludusv1.FindMatchRequest, send func(*ludusv1.FindMatchResponse) error) error
	left chan struct{} // closed when a FindMatch handler returns

	mu   sync.Mutex
	reqs []*ludusv1.FindMatchRequest
}

func (m *fakeMatchmaker) FindMatch(ctx context.Context, req *connect.Request[ludusv1.FindMatchRequest], st *connect.ServerStream[ludusv1.FindMatchResponse]) error {
	defer close(m.left)
	if !strings.HasPrefix(req.Header().Get("Authorization"), "Bearer ticket-") {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("no ticket"))
	}
	m.mu.Lock()
	m.reqs = append(m.reqs, req.Msg)
	m.mu.Unlock()
	return m.find(ctx, req.Msg, st.Send)
}

func (m *fakeMatchmaker) CreateParty(ctx context.Context, req *connect.Request[ludusv1.CreatePartyRequest]) (*connect.Response[ludusv1.CreatePartyResponse], error) {
	if !strings.HasPrefix(req.Header().Get("Authorization"), "Bearer ticket-") {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("no ticket"))
	}
	switch {
	case req.Msg.Mode != "arena":
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no matchmaking rules for mode %q", req.Msg.Mode))
	case req.Msg.Size != 2:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("a party of %d is larger than a team of mode \"arena\" (2 players)", req.Msg.Size))
	}
	return connect.NewResponse(&ludusv1.CreatePartyResponse{Code: "K7QX2M", ExpiresAtUnixMs: 1_700_000_900_000}), nil
}

func (m *fakeMatchmaker) requests() []*ludusv1.FindMatchRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*ludusv1.FindMatchRequest(nil), m.reqs...)
}

// startMatchmaker serves a fake gateway with m and signs a client in.
func startMatchmaker(t *testing.T, m *fakeMatchmaker, opts ...Option) (*Client, *fakeGateway) {
	t.Helper()
	m.left = make(chan struct{})
	f := &fakeGateway{game: arenaGame(), matchmaker: m}
	return dialFake(t, f.start(t), opts...), f
}

func searching(elapsedMs int64) *ludusv1.FindMatchResponse {
	return &ludusv1.FindMatchResponse{Msg: &ludusv1.FindMatchResponse_Searching{Searching: &ludusv1.MatchSearching{
		Band: 100 + float64(elapsedMs)/100, ElapsedMs: elapsedMs, QueueSize: 3, PartyJoined: 1}}}
}

// collect reads a search's updates until Updates is closed.
func collect(t *testing.T, s *Search) []Update {
	t.Helper()
	var out []Update
	timeout := time.After(10 * time.Second)
	for {
		select {
		case u, ok := <-s.Updates():
			if !ok {
				return out
			}
			out = append(out, u)
		case <-timeout:
			t.Fatalf("Updates not closed after 10 s; got %v", out)
		}
	}
}

func waitLeft(t *testing.T, m *fakeMatchmaker) {
	t.Helper()
	select {
	case <-m.left:
	case <-time.After(5 * time.Second):
		t.Fatal("the gateway's FindMatch handler is still running: the stream was not closed")
	}
}

func TestFindMatchUpdatesInOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := &fakeMatchmaker{find: func(ctx context.Context, req *ludusv1.FindMatchRequest, send func(*ludusv1.FindMatchResponse) error) error {
		for _, ms := range []int64{0, 1000, 2000} {
			if err := send(searching(ms)); err != nil {
				return err
			}
		}
		return send(&ludusv1.FindMatchResponse{Msg: &ludusv1.FindMatchResponse_Found{Found: &ludusv1.MatchFound{
			GameId: "g7", Region: "local", Team: 1, Slot: 3, Teammates: []string{"a_1", "a_2"}}}})
	}}
	c, _ := startMatchmaker(t, m)
	s, err := c.FindMatch(ctx, FindMatchOptions{Mode: "arena", RTT: map[string]int32{"local": 12, "eu": 80}})
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, s)
	want := []Update{
		Searching{Band: 100, Elapsed: 0, QueueSize: 3, PartyJoined: 1, PartySize: 1},
		Searching{Band: 110, Elapsed: time.Second, QueueSize: 3, PartyJoined: 1, PartySize: 1},
		Searching{Band: 120, Elapsed: 2 * time.Second, QueueSize: 3, PartyJoined: 1, PartySize: 1},
		Found{GameID: "g7", Region: "local", Team: 1, Slot: 3, Teammates: []string{"a_1", "a_2"}},
	}
	if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
		t.Fatalf("updates\n%#v\nwant\n%#v", got, want)
	}
	<-s.Done()
	if s.Err() != nil {
		t.Fatalf("err %v after an outcome", s.Err())
	}
	reqs := m.requests()
	if len(reqs) != 1 || reqs[0].Mode != "arena" || reqs[0].PartyCode != "" || len(reqs[0].RttMs) != 2 || reqs[0].RttMs["eu"] != 80 {
		t.Fatalf("requests %v", reqs)
	}
	s.Cancel() // after the end: nothing happens, and it returns
}

// TestFindMatchSlowReaderKeepsOutcome: a reader that falls behind loses old
// searching updates, in order still, but always gets the outcome.
func TestFindMatchSlowReaderKeepsOutcome(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := &fakeMatchmaker{find: func(ctx context.Context, req *ludusv1.FindMatchRequest, send func(*ludusv1.FindMatchResponse) error) error {
		for i := range 100 {
			if err := send(searching(int64(i) * 1000)); err != nil {
				return err
			}
		}
		return send(&ludusv1.FindMatchResponse{Msg: &ludusv1.FindMatchResponse_TimedOut{TimedOut: &ludusv1.MatchTimedOut{Reason: "no match within 45s"}}})
	}}
	c, _ := startMatchmaker(t, m)
	s, err := c.FindMatch(ctx, FindMatchOptions{Mode: "arena", RTT: map[string]int32{"local": 1}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done(): // nobody read: the search still ends
	case <-time.After(10 * time.Second):
		t.Fatal("the search blocked on its reader")
	}
	got := collect(t, s)
	if len(got) == 0 || len(got) > searchBuffer {
		t.Fatalf("%d updates kept: %v", len(got), got)
	}
	if last, ok := got[len(got)-1].(TimedOut); !ok || last.Reason != "no match within 45s" {
		t.Fatalf("last update %v, want the time-out", got[len(got)-1])
	}
	prev := time.Duration(-1)
	for _, u := range got[:len(got)-1] {
		sr := u.(Searching)
		if sr.Elapsed <= prev {
			t.Fatalf("updates out of order: %v", got)
		}
		prev = sr.Elapsed
	}
	if prev != 99*time.Second {
		t.Fatalf("the newest searching update was dropped: %v", got)
	}
}

// TestFindMatchCancelClosesStream: Cancel ends the gateway's stream (which
// leaves the queue), closes Updates without an outcome and is no error; so
// does the end of the context, which is one.
func TestFindMatchCancelClosesStream(t *testing.T) {
	endless := func(ctx context.Context, req *ludusv1.FindMatchRequest, send func(*ludusv1.FindMatchResponse) error) error {
		for i := int64(0); ; i++ {
			if err := send(searching(i * 1000)); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	t.Run("Cancel", func(t *testing.T) {
		m := &fakeMatchmaker{find: endless}
		c, _ := startMatchmaker(t, m)
		s, err := c.FindMatch(context.Background(), FindMatchOptions{Mode: "arena", RTT: map[string]int32{"local": 1}})
		if err != nil {
			t.Fatal(err)
		}
		if u := <-s.Updates(); u != (Searching{Band: 100, QueueSize: 3, PartyJoined: 1, PartySize: 1}) {
			t.Fatalf("first update %v", u)
		}
		s.Cancel()
		waitLeft(t, m)
		for _, u := range collect(t, s) {
			if _, ok := u.(Searching); !ok {
				t.Fatalf("an outcome after Cancel: %v", u)
			}
		}
		if s.Err() != nil {
			t.Fatalf("err %v after Cancel", s.Err())
		}
		s.Cancel()
	})
	t.Run("context", func(t *testing.T) {
		m := &fakeMatchmaker{find: endless}
		c, _ := startMatchmaker(t, m)
		ctx, cancel := context.WithCancel(context.Background())
		s, err := c.FindMatch(ctx, FindMatchOptions{Mode: "arena", RTT: map[string]int32{"local": 1}})
		if err != nil {
			t.Fatal(err)
		}
		<-s.Updates()
		cancel()
		waitLeft(t, m)
		collect(t, s)
		if !errors.Is(s.Err(), context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", s.Err())
		}
	})
}

func TestFindMatchErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	refuse := func(code connect.Code, msg string) func(context.Context, *ludusv1.FindMatchRequest, func(*ludusv1.FindMatchResponse) error) error {
		return func(context.Context, *ludusv1.FindMatchRequest, func(*ludusv1.FindMatchResponse) error) error {
			return connect.NewError(code, errors.New(msg))
		}
	}
	// Refused before the first update: FindMatch fails.
	for _, tc := range []struct {
		code connect.Code
		msg  string
	}{
		{connect.CodeNotFound, `no matchmaking rules for mode "nosuch": set them with MatchmakingAdminService.SetRules`},
		{connect.CodeAlreadyExists, "this account is already in a matchmaking queue; close the other search first"},
		{connect.CodeInvalidArgument, "rtt_ms: value must be greater than or equal to 0"},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			m := &fakeMatchmaker{find: refuse(tc.code, tc.msg)}
			c, _ := startMatchmaker(t, m)
			s, err := c.FindMatch(ctx, FindMatchOptions{Mode: "nosuch", RTT: map[string]int32{"local": 1}})
			if s != nil || connect.CodeOf(err) != tc.code {
				t.Fatalf("search %v, err %v; want code %v", s, err, tc.code)
			}
			if msg := err.Error(); !strings.Contains(msg, `find a match in mode "nosuch"`) || !strings.Contains(msg, tc.msg) {
				t.Fatalf("message %q", msg)
			}
		})
	}
	// Broken after the first update: Err says so, with its code.
	for name, tc := range map[string]struct {
		find func(context.Context, *ludusv1.FindMatchRequest, func(*ludusv1.FindMatchResponse) error) error
		want string
	}{
		"lost lease": {func(ctx context.Context, req *ludusv1.FindMatchRequest, send func(*ludusv1.FindMatchResponse) error) error {
			_ = send(searching(0))
			return connect.NewError(connect.CodeUnavailable, errors.New("the matchmaker lost its lease; search again"))
		}, "the matchmaker lost its lease"},
		"no outcome": {func(ctx context.Context, req *ludusv1.FindMatchRequest, send func(*ludusv1.FindMatchResponse) error) error {
			return send(searching(0))
		}, "ended without an outcome"},
	} {
		t.Run(name, func(t *testing.T) {
			m := &fakeMatchmaker{find: tc.find}
			c, _ := startMatchmaker(t, m)
			s, err := c.FindMatch(ctx, FindMatchOptions{Mode: "arena", RTT: map[string]int32{"local": 1}})
			if err != nil {
				t.Fatal(err)
			}
			if got := collect(t, s); len(got) != 1 {
				t.Fatalf("updates %v", got)
			}
			if err := s.Err(); connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want Unavailable: %s", err, tc.want)
			}
		})
	}
	t.Run("cancelled", func(t *testing.T) {
		m := &fakeMatchmaker{find: func(ctx context.Context, req *ludusv1.FindMatchRequest, send func(*ludusv1.FindMatchResponse) error) error {
			if err := send(searching(0)); err != nil {
				return err
			}
			return send(&ludusv1.FindMatchResponse{Msg: &ludusv1.FindMatchResponse_Cancelled{Cancelled: &ludusv1.MatchCancelled{Reason: "a party member left"}}})
		}}
		c, _ := startMatchmaker(t, m)
		s, err := c.FindMatch(ctx, FindMatchOptions{Mode: "arena", PartyCode: "K7QX2M", PartySize: 2, RTT: map[string]int32{"local": 1}})
		if err != nil {
			t.Fatal(err)
		}
		got := collect(t, s)
		if len(got) != 2 || got[1] != (Cancelled{Reason: "a party member left"}) || s.Err() != nil {
			t.Fatalf("updates %v, err %v", got, s.Err())
		}
		if msg := got[0].String(); msg != "searching: band ±100, 0s elapsed, 3 in the queue, 1 of 2 of the party searching" {
			t.Fatalf("progress line %q", msg)
		}
		if r := m.requests()[0]; r.PartyCode != "K7QX2M" || r.PartySize != 2 {
			t.Fatalf("request %v", r)
		}
	})
	t.Run("not signed in", func(t *testing.T) {
		m := &fakeMatchmaker{find: refuse(connect.CodeInternal, "called")}
		m.left = make(chan struct{})
		f := &fakeGateway{game: arenaGame(), matchmaker: m}
		c := Dial(f.start(t))
		defer c.Close()
		if _, err := c.FindMatch(ctx, FindMatchOptions{Mode: "arena", RTT: map[string]int32{"local": 1}}); !errors.Is(err, ErrNotSignedIn) {
			t.Fatalf("err %v, want ErrNotSignedIn", err)
		}
		if _, err := c.CreateParty(ctx, "arena", 2); !errors.Is(err, ErrNotSignedIn) {
			t.Fatalf("create party: err %v, want ErrNotSignedIn", err)
		}
		if n := len(m.requests()); n != 0 {
			t.Fatalf("%d searches reached the gateway", n)
		}
	})
}

func TestMeasureRTT(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := &fakeGateway{game: arenaGame(), pingDelay: 30 * time.Millisecond}
	url := f.start(t)
	c := dialFake(t, url)
	rtt, err := c.MeasureRTT(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if ms, ok := rtt[DefaultRegion]; len(rtt) != 1 || !ok || ms < 30 || ms > 1000 {
		t.Fatalf("rtt %v, want about 30 ms for %q", rtt, DefaultRegion)
	}
	if f.pings.Load() != 3 {
		t.Fatalf("%d pings, want 3", f.pings.Load())
	}
	for _, n := range []int{0, -1, MaxRTTSamples + 1} {
		if _, err := c.MeasureRTT(ctx, n); err == nil || !strings.Contains(err.Error(), "1 to 100") {
			t.Fatalf("%d pings: err %v", n, err)
		}
	}
	if f.pings.Load() != 3 {
		t.Fatalf("refused measurements pinged (%d pings)", f.pings.Load())
	}
	// A gateway that names its region in Ping: the measurement is keyed by it.
	named := &fakeGateway{game: arenaGame(), region: "us-east"}
	nc := dialFake(t, named.start(t))
	if rtt, err := nc.MeasureRTT(ctx, 1); err != nil || len(rtt) != 1 || rtt["us-east"] < 0 {
		t.Fatalf("rtt %v, %v; want it keyed by the gateway's region us-east", rtt, err)
	}
	eu := dialFake(t, url, WithRegion("eu-west"))
	if rtt, err := eu.MeasureRTT(ctx, 1); err != nil || len(rtt) != 1 || rtt["eu-west"] < 30 {
		t.Fatalf("WithRegion: rtt %v, %v", rtt, err)
	}
	f.pingErr = connect.NewError(connect.CodeUnavailable, errors.New("draining"))
	if _, err := c.MeasureRTT(ctx, 2); connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "ping 1 of 2") {
		t.Fatalf("failing ping: err %v", err)
	}
}

// TestFindMatchMeasuresRTT: without RTT, FindMatch measures it.
func TestFindMatchMeasuresRTT(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := &fakeMatchmaker{find: func(ctx context.Context, req *ludusv1.FindMatchRequest, send func(*ludusv1.FindMatchResponse) error) error {
		return send(&ludusv1.FindMatchResponse{Msg: &ludusv1.FindMatchResponse_Found{Found: &ludusv1.MatchFound{GameId: "g1", Region: "local"}}})
	}}
	c, f := startMatchmaker(t, m)
	f.pingDelay = 20 * time.Millisecond
	s, err := c.FindMatch(ctx, FindMatchOptions{Mode: "arena"})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, s)
	if r := m.requests()[0]; len(r.RttMs) != 1 || r.RttMs["local"] < 20 || f.pings.Load() != 3 {
		t.Fatalf("rtt sent %v after %d pings", r.RttMs, f.pings.Load())
	}
}

func TestCreateParty(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _ := startMatchmaker(t, &fakeMatchmaker{})
	p, err := c.CreateParty(ctx, "arena", 2)
	if err != nil {
		t.Fatal(err)
	}
	if p != (Party{Code: "K7QX2M", Mode: "arena", Size: 2, Expires: time.UnixMilli(1_700_000_900_000)}) {
		t.Fatalf("party %+v", p)
	}
	for _, tc := range []struct {
		mode string
		size int
		code connect.Code
	}{{"arena", 5, connect.CodeInvalidArgument}, {"nosuch", 2, connect.CodeNotFound}} {
		_, err := c.CreateParty(ctx, tc.mode, tc.size)
		if connect.CodeOf(err) != tc.code || !strings.Contains(err.Error(), fmt.Sprintf("create a party of %d for mode %q", tc.size, tc.mode)) {
			t.Fatalf("party of %d for %q: err %v, want %v", tc.size, tc.mode, err, tc.code)
		}
	}
}
