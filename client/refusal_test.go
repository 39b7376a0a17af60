package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// An input the game refuses for good (the player's share of the input log is
// used up: ResourceExhausted naming no wait) after frames flowed ends the
// session with the refusal (it re-opened the stream for ever).
func TestInputRefusedForGoodEndsSession(t *testing.T) {
	a := &playGateway{fakeGateway: &fakeGateway{game: arenaGame()}}
	a.play = func(ctx context.Context, n int32, st *connect.BidiStream[ludusv1.PlayRequest, ludusv1.PlayResponse]) error {
		if err := openRunning(st, 1); err != nil {
			return err
		}
		for {
			m, err := st.Receive()
			if err != nil {
				return nil
			}
			if m.GetInput() != nil {
				return connect.NewError(connect.CodeResourceExhausted, errors.New("your inputs to this game reached 1572864 bytes, the most one player may send in one game"))
			}
		}
	}
	c := dialFake(t, a.start(t, nil))
	s, err := c.Play(context.Background(), "g1", Pixels)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	frames(t, s, 1, 10*time.Second)
	if _, err := s.Send([]byte{1}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(15 * time.Second):
		t.Fatalf("the session still runs 15 s after the game refused its input for good; %d streams", a.opens.Load())
	}
	if err := s.Err(); connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "reached 1572864 bytes") {
		t.Fatalf("session error %v, want the game's refusal", err)
	}
	if n := a.opens.Load(); n > 3 {
		t.Errorf("%d streams opened, want the refusal taken as final by the second", n)
	}
}

// A refusal that names its wait stays temporary: the session waits and goes
// on.
func TestInputRefusalNamingWaitIsRetried(t *testing.T) {
	a := &playGateway{fakeGateway: &fakeGateway{game: arenaGame()}}
	a.play = func(ctx context.Context, n int32, st *connect.BidiStream[ludusv1.PlayRequest, ludusv1.PlayResponse]) error {
		if n <= 3 {
			if err := openRunning(st); err != nil {
				return err
			}
			for {
				m, err := st.Receive()
				if err != nil {
					return nil
				}
				if m.GetInput() != nil {
					return connect.NewError(connect.CodeResourceExhausted, errors.New("too many inputs: retry in 1 s"))
				}
			}
		}
		return a.fakeGateway.Play(ctx, st)
	}
	c := dialFake(t, a.start(t, nil))
	s, err := c.Play(context.Background(), "g1", Pixels)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Send([]byte{1}); err != nil {
		t.Fatal(err)
	}
	select {
	case ack := <-s.Acks():
		if ack.Input != 1 {
			t.Fatalf("ack %+v, want input 1", ack)
		}
	case <-s.Done():
		t.Fatalf("the session ended: %v", s.Err())
	case <-time.After(15 * time.Second):
		t.Fatalf("no ack after 15 s; %d streams", a.opens.Load())
	}
}

// Streams that deliver a frame and break at once, each time, do not keep the
// session alive for ever: only a stream that delivered for a while restores
// the give-up clock.
func TestBriefStreamsDoNotResetGiveUp(t *testing.T) {
	shortStall(t, 5*time.Second, 2*time.Second)
	a := &playGateway{fakeGateway: &fakeGateway{game: arenaGame()}}
	a.play = func(ctx context.Context, n int32, st *connect.BidiStream[ludusv1.PlayRequest, ludusv1.PlayResponse]) error {
		if err := openRunning(st, int64(n)); err != nil {
			return err
		}
		return connect.NewError(connect.CodeUnavailable, errors.New("the node is overloaded"))
	}
	c := dialFake(t, a.start(t, nil))
	s, err := c.Play(context.Background(), "g1", Pixels)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	go func() {
		for range s.Frames() {
		}
	}()
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("the session still runs after 10 s of streams that break at once (give-up %v); %d streams", giveUpAfter, a.opens.Load())
	}
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "could not be restored") {
		t.Fatalf("session error %v, want one saying the stream could not be restored", err)
	}
}
