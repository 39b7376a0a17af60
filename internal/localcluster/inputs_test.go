package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/sdk/abi"
	"ludus.dev/ludus/simnode/inputlog"
)

func join(tick int64, slot uint8, account string) inputlog.Entry {
	return inputlog.Entry{Tick: tick, Account: account, Event: abi.Event{Kind: abi.EventJoin, Slot: slot}}
}

func leave(tick int64, slot uint8) inputlog.Entry {
	return inputlog.Entry{Tick: tick, Event: abi.Event{Kind: abi.EventLeave, Slot: slot}}
}

func input(tick int64, slot uint8, seq uint64) inputlog.Entry {
	return inputlog.Entry{Tick: tick, Seq: seq, Event: abi.Event{Kind: abi.EventInput, Slot: slot, Payload: []byte{1}}}
}

func TestIndexLogMapsSlotsToAccounts(t *testing.T) {
	chunks := []*inputlog.Chunk{
		{From: 0, To: 10, Entries: []inputlog.Entry{join(0, 0, "alice"), join(0, 1, "bob"), input(1, 0, 1), input(1, 1, 1), input(2, 0, 2)}},
		{From: 10, To: 20, Entries: []inputlog.Entry{leave(10, 1), join(11, 1, "carol"), input(12, 1, 1), input(13, 1, 1), input(14, 5, 9)}},
	}
	l := IndexLog(chunks)
	for _, c := range []struct {
		account string
		seq     uint64
		want    int
	}{{"alice", 1, 1}, {"alice", 2, 1}, {"alice", 3, 0}, {"bob", 1, 1}, {"bob", 2, 0}, {"carol", 1, 2}, {"slot:5", 9, 1}} {
		if got := l.Applied(c.account, c.seq); got != c.want {
			t.Errorf("Applied(%s, %d) = %d, want %d", c.account, c.seq, got, c.want)
		}
	}
	// Seq 1 of alice, bob and carol are three different inputs: only carol's is doubled.
	if got := l.AppliedTwice(); got != 1 {
		t.Errorf("AppliedTwice = %d, want 1", got)
	}
	if l.Unjoined != 1 {
		t.Errorf("Unjoined = %d, want 1", l.Unjoined)
	}
	if l.Inputs("alice") != 2 {
		t.Errorf("Inputs(alice) = %d, want 2", l.Inputs("alice"))
	}
}

func TestCheckAcks(t *testing.T) {
	// alice's log holds 1, 2, 4, 7 and 10; bob's holds 3.
	chunks := []*inputlog.Chunk{{From: 0, To: 50, Entries: []inputlog.Entry{
		join(0, 0, "alice"), join(0, 1, "bob"),
		input(1, 0, 1), input(2, 0, 2), input(3, 1, 3), input(4, 0, 4), input(5, 0, 7), input(6, 0, 10),
	}}}
	l := IndexLog(chunks)
	cases := []struct {
		name string
		acks []AckRecord
		want AckCheck
	}{
		{"in the log", []AckRecord{{Seq: 1, AckedSeq: 1}, {Seq: 2, AckedSeq: 2}}, AckCheck{Acked: 2}},
		{"superseded by a logged input", []AckRecord{{Seq: 5, AckedSeq: 5, SupersededBy: 7}}, AckCheck{Acked: 1, Superseded: 1}},
		{"superseded by an input not in the log", []AckRecord{{Seq: 5, AckedSeq: 5, SupersededBy: 8}},
			AckCheck{Acked: 1, Superseded: 1, Lost: 1, NotInLog: 1}},
		{"superseded by an earlier input", []AckRecord{{Seq: 5, AckedSeq: 5, SupersededBy: 4}},
			AckCheck{Acked: 1, Superseded: 1, NotInLog: 1}},
		// The old node: a lower seq answered OK with the higher acked_seq,
		// never logged. acked_seq is in the log, so only the new count sees it.
		{"answered with a higher acked_seq", []AckRecord{{Seq: 5, AckedSeq: 7}}, AckCheck{Acked: 1, SeqMismatch: 1, NotInLog: 1}},
		{"acked but absent", []AckRecord{{Seq: 6, AckedSeq: 6}}, AckCheck{Acked: 1, Lost: 1, NotInLog: 1}},
		{"another account's input", []AckRecord{{Seq: 3, AckedSeq: 3}}, AckCheck{Acked: 1, Lost: 1, NotInLog: 1}},
		{"cumulative, a later input up to the ack is logged", []AckRecord{{Seq: 5, CoveredBy: 7}, {Seq: 6, CoveredBy: 7}, {Seq: 7, AckedSeq: 7}},
			AckCheck{Acked: 3, Cumulative: 2}},
		{"cumulative, nothing up to the ack is logged", []AckRecord{{Seq: 8, CoveredBy: 9}, {Seq: 9, AckedSeq: 9}},
			AckCheck{Acked: 2, Cumulative: 1, Lost: 1, NotInLog: 2}},
		{"cumulative, only a later input than the ack is logged", []AckRecord{{Seq: 8, CoveredBy: 9}},
			AckCheck{Acked: 1, Cumulative: 1, NotInLog: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := CheckAcks(l, "alice", c.acks); got != c.want {
				t.Fatalf("CheckAcks = %+v, want %+v", got, c.want)
			}
		})
	}
	sum := CheckAcks(l, "alice", cases[0].acks).Add(CheckAcks(l, "alice", cases[4].acks))
	if want := (AckCheck{Acked: 3, SeqMismatch: 1, NotInLog: 1}); sum != want {
		t.Fatalf("Add = %+v, want %+v", sum, want)
	}
}

func TestTickTrackerRollback(t *testing.T) {
	var tr TickTracker
	// Steady frames every 2 ticks, a re-attach back to tick 6 (10 ticks
	// rolled back), the climb back (no new jump), then a 1-tick jump back.
	ticks := []int64{10, 12, 14, 16, 6, 8, 10, 18, 20, 19, 22}
	wantRB := []int64{0, 0, 0, 0, 10, 8, 6, 0, 0, 1, 0}
	for i, tick := range ticks {
		if rb := tr.Observe(tick); rb != wantRB[i] {
			t.Fatalf("frame %d (tick %d): rollback %d, want %d", i, tick, rb, wantRB[i])
		}
	}
	if tr.MaxRollback() != 10 || tr.Rollbacks() != 2 {
		t.Fatalf("max %d rollbacks %d, want 10 and 2", tr.MaxRollback(), tr.Rollbacks())
	}
	var same TickTracker
	for _, tick := range []int64{100, 100, 102, 102} {
		same.Observe(tick)
	}
	if same.MaxRollback() != 0 || same.Rollbacks() != 0 {
		t.Fatalf("repeated ticks counted as rollback: %d, %d", same.MaxRollback(), same.Rollbacks())
	}
	if got := TicksToMs(tr.MaxRollback(), 35); got < 285.7 || got > 285.8 {
		t.Fatalf("10 ticks at 35/s = %v ms", got)
	}
	if TicksToMs(10, 0) != 0 {
		t.Fatal("TicksToMs with no tick rate")
	}
}

func TestPlayDriverAcks(t *testing.T) {
	d := &PlayDriver{Window: 4}
	d.samples, d.acks = map[uint64]*InputSample{}, map[uint64]AckRecord{}
	for range 5 {
		d.newInput()
	}
	if st := d.Stats(); st.Pending != 4 || st.Skipped != 1 {
		t.Fatalf("window of 4: %+v", st)
	}
	now := time.Now()
	d.ack(&ludusv1.InputAck{AckedSeq: 3}, now)
	d.ack(&ludusv1.InputAck{AckedSeq: 3}, now) // a repeat changes nothing
	d.ack(&ludusv1.InputAck{AckedSeq: 4, SupersededBySeq: 6}, now)
	d.ack(&ludusv1.InputAck{AckedSeq: 99}, now)
	want := []AckRecord{{Seq: 1, CoveredBy: 3}, {Seq: 2, CoveredBy: 3}, {Seq: 3, AckedSeq: 3}, {Seq: 4, AckedSeq: 4, SupersededBy: 6}}
	got := d.Acks()
	if len(got) != len(want) {
		t.Fatalf("acks %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ack %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if st := d.Stats(); st.Pending != 0 || st.UnknownAcks != 1 {
		t.Fatalf("after the acks: %+v", st)
	}
	lat, unacked := AckLatencies(d.Samples(), time.Time{}, now.Add(time.Hour), now.Add(time.Second))
	if len(lat) != 4 || unacked != 0 {
		t.Fatalf("latencies %v, %d unacked", lat, unacked)
	}
}

func TestAckLatencies(t *testing.T) {
	t0 := time.Unix(1000, 0)
	samples := []InputSample{
		{Seq: 1, SentAt: t0, AckedAt: t0.Add(100 * time.Millisecond)},
		{Seq: 2, SentAt: t0.Add(time.Second), AckedAt: t0.Add(1300 * time.Millisecond)},
		{Seq: 3, SentAt: t0.Add(2 * time.Second)},
		{Seq: 4, SentAt: t0.Add(5 * time.Second), AckedAt: t0.Add(5001 * time.Millisecond)},
	}
	lat, unacked := AckLatencies(samples, t0.Add(time.Second), t0.Add(5*time.Second), t0.Add(3*time.Second))
	if unacked != 1 || len(lat) != 2 || lat[0] != 300 || lat[1] != 1000 {
		t.Fatalf("latencies %v, %d unacked", lat, unacked)
	}
}

// fakeGame is a GameService for the drivers: it answers SendInput and Play
// inputs, failing some first attempts with Unavailable and ending every Play
// stream after a few inputs, as a moving game does.
type fakeGame struct {
	ludusv1connect.UnimplementedGameServiceHandler
	mu       sync.Mutex
	attempts map[uint64]int
	logged   map[uint64]int
	streams  int
}

func (f *fakeGame) SendInput(ctx context.Context, req *connect.Request[ludusv1.SendInputRequest]) (*connect.Response[ludusv1.SendInputResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	seq := req.Msg.Seq
	f.attempts[seq]++
	if seq%3 == 0 && f.attempts[seq] == 1 {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("moving"))
	}
	if seq == 7 {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("refused"))
	}
	f.logged[seq]++
	return connect.NewResponse(&ludusv1.SendInputResponse{AckedSeq: seq}), nil
}

func (f *fakeGame) Play(ctx context.Context, s *connect.BidiStream[ludusv1.PlayRequest, ludusv1.PlayResponse]) error {
	first, err := s.Receive()
	if err != nil || first.GetStart() == nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("no start"))
	}
	f.mu.Lock()
	f.streams++
	f.mu.Unlock()
	if err := s.Send(&ludusv1.PlayResponse{Msg: &ludusv1.PlayResponse_Frame{Frame: &ludusv1.Frame{Tick: 1}}}); err != nil {
		return err
	}
	for n := 0; ; n++ {
		m, err := s.Receive()
		if err != nil {
			return nil
		}
		in := m.GetInput()
		if n == 5 {
			// The sixth input of every stream is not acknowledged: the
			// stream ends (the client must re-send it).
			return connect.NewError(connect.CodeUnavailable, errors.New("game moving"))
		}
		f.mu.Lock()
		f.logged[in.Seq]++
		f.mu.Unlock()
		if err := s.Send(&ludusv1.PlayResponse{Msg: &ludusv1.PlayResponse_Ack{Ack: &ludusv1.InputAck{AckedSeq: in.Seq}}}); err != nil {
			return err
		}
	}
}

func startFake(t *testing.T) (*fakeGame, string) {
	f := &fakeGame{attempts: map[uint64]int{}, logged: map[uint64]int{}}
	_, h := ludusv1connect.NewGameServiceHandler(f)
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func TestUnaryDriverRetriesSameSeq(t *testing.T) {
	f, url := startFake(t)
	d := &UnaryDriver{Client: ludusv1connect.NewGameServiceClient(http.DefaultClient, url), Game: "g", Rate: 200}
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	d.Run(ctx)
	cancel()
	acks := d.Acks()
	if len(acks) < 10 {
		t.Fatalf("only %d inputs acked", len(acks))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range acks {
		if a.AckedSeq != a.Seq || f.logged[a.Seq] != 1 {
			t.Fatalf("ack %+v, logged %d times", a, f.logged[a.Seq])
		}
		if a.Seq%3 == 0 && f.attempts[a.Seq] != 2 {
			t.Fatalf("input %d: %d attempts, want a retry", a.Seq, f.attempts[a.Seq])
		}
	}
	retried, final, givenUp := d.Errors()
	if retried == "" || final != "failed_precondition:1" || givenUp != 1 {
		t.Fatalf("errors: retried %q final %q given up %d", retried, final, givenUp)
	}
	for _, a := range acks {
		if a.Seq == 7 {
			t.Fatal("input 7 was refused but counted as acknowledged")
		}
	}
}

func TestPlayDriverResendsAfterStreamEnds(t *testing.T) {
	f, url := startFake(t)
	var frames int
	var mu sync.Mutex
	d := &PlayDriver{Client: ludusv1connect.NewGameServiceClient(H2CClient(), url, connect.WithGRPC()), Game: "g",
		OnFrame: func(*ludusv1.Frame) { mu.Lock(); frames++; mu.Unlock() }}
	d.SetRate(100)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	d.Run(ctx)
	cancel()
	st := d.Stats()
	if st.Streams < 3 || st.StreamErrs == "" {
		t.Fatalf("stats %+v: the fake ends every stream after 6 inputs", st)
	}
	acks := d.Acks()
	if len(acks) < 20 {
		t.Fatalf("only %d acks over %d streams", len(acks), st.Streams)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// Every input up to the highest acked one was acknowledged and logged:
	// the unacknowledged sixth input of each stream was re-sent on the next.
	for i, a := range acks {
		if a.Seq != uint64(i+1) || a.AckedSeq != a.Seq || f.logged[a.Seq] != 1 {
			t.Fatalf("ack %d = %+v, logged %d times", i, a, f.logged[a.Seq])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if frames < st.Streams-1 {
		t.Fatalf("%d frames over %d streams", frames, st.Streams)
	}
}

// The bench's JSON field names are an interface: the old ones stay, the new
// ones are there.
func TestFailoverResultFields(t *testing.T) {
	b, err := json.Marshal(FailoverResult{})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"games", "victim_games", "lease_ttl_ms", "takeover_ms_p50", "takeover_ms_p99",
		"acked_inputs", "acked_inputs_lost", "inputs_applied_twice", "games_lost", "state_hashes_checked",
		"replay_mismatches", "handoff_pause_ms_p99", "handoffs", "replay_ms_per_min_of_play",
		"etcd_writes_per_game_sec", "spectator_delay_ms_p99",
		"ok_inputs_not_in_log", "rollback_ticks_max", "rollback_ms_max", "delivery"} {
		if _, ok := m[k]; !ok {
			t.Errorf("field %s missing", k)
		}
	}
}
