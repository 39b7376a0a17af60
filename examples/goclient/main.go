// Command goclient plays the arena through a Ludus gateway with the native Go
// client (package ludus.dev/ludus/client): it signs in as a guest, creates an
// arena game with bots (or, with -find, finds one through matchmaking), plays
// it for a while in the chosen delivery mode — snapshots drawn locally by the
// arena module's own ludus_render in wazero, or pixels drawn by the sim node —
// turns left once, and prints what it measured:
//
//	go run ./cmd/ludus dev                      # in one terminal
//	go run ./examples/goclient -mode snapshots  # in another
//	go run ./examples/goclient -mode pixels
//
// With -find MODE it measures its round trip to the gateway, searches for a
// match of MODE, prints the search's progress (rating band, time waited), and
// plays the game it was placed in. `ludus dev` seeds the mode "arena": two
// teams of two, bots filling the empty seats after 45 s. Start four copies to
// be matched at once, or one and wait:
//
//	for i in 1 2 3 4; do go run ./examples/goclient -find arena & done; wait
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"time"

	"ludus.dev/ludus/client"
	"ludus.dev/ludus/games/arena"
)

func main() {
	gateway := flag.String("gateway", "http://127.0.0.1:8080", "gateway URL (as ludus dev serves it)")
	tenant := flag.String("tenant", "demo", "tenant slug")
	modeFlag := flag.String("mode", "snapshots", "delivery: snapshots, pixels or auto")
	seconds := flag.Float64("seconds", 10, "how long to play")
	bots := flag.Int("bots", 3, "bot players in the new game (not with -find)")
	find := flag.String("find", "", "find a match of this matchmaking `mode` (e.g. arena) instead of creating a game")
	region := flag.String("region", client.DefaultRegion, "the gateway's region, as the matchmaking rules name it (with -find)")
	cache := flag.String("cache", "", "directory for wazero's compiled code (default: compile in memory every run)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: goclient [flags]\n\nPlays the arena through a Ludus gateway: a new game with bots, or with -find MODE\na match found by matchmaking. Flags:\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	mode, err := client.ParseMode(*modeFlag)
	if err != nil {
		log.Fatal(err)
	}
	o := options{gateway: *gateway, tenant: *tenant, mode: mode, playFor: time.Duration(*seconds * float64(time.Second)),
		bots: *bots, find: *find, region: *region, cache: *cache}
	if err := run(o); err != nil {
		log.Fatal(err)
	}
}

type options struct {
	gateway, tenant string
	mode            client.Mode
	playFor         time.Duration
	bots            int
	find            string // matchmaking mode, or "" to create a game
	region          string
	cache           string
}

func (o options) dial(gateway string) *client.Client {
	opts := []client.Option{client.WithRegion(o.region)}
	if o.cache != "" {
		opts = append(opts, client.WithCompilationCache(o.cache))
	}
	return client.Dial(gateway, opts...)
}

func run(o options) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := o.dial(o.gateway)
	defer c.Close()

	host, _ := os.Hostname()
	device := client.NewDeviceID()
	acc, err := c.GuestLogin(ctx, o.tenant, device, "goclient@"+host)
	if err != nil {
		return err
	}
	var gameID string
	if o.find == "" {
		g, err := c.CreateGame(ctx, "arena", o.bots)
		if err != nil {
			return err
		}
		gameID = g.GameId
		fmt.Printf("signed in as %s (%s); created game %s\n", acc.DisplayName, acc.ID, gameID)
	} else {
		fmt.Printf("signed in as %s (%s)\n", acc.DisplayName, acc.ID)
		found, err := findMatch(ctx, c, o.find)
		if err != nil {
			return err
		}
		gameID = found.GameID
		if found.Gateway != "" && found.Gateway != c.BaseURL() {
			// The game runs in another region: play it through that region's
			// gateway, as the same guest.
			fmt.Printf("joining through %s\n", found.Gateway)
			c = o.dial(found.Gateway)
			defer c.Close()
			if _, err := c.GuestLogin(ctx, o.tenant, device, acc.DisplayName); err != nil {
				return err
			}
		}
	}
	return play(ctx, c, gameID, o.mode, o.playFor)
}

// findMatch measures the round trip to the gateway, searches for a match of
// mode and prints the search's progress until its outcome.
func findMatch(ctx context.Context, c *client.Client, mode string) (client.Found, error) {
	rtt, err := c.MeasureRTT(ctx, 5)
	if err != nil {
		return client.Found{}, err
	}
	for region, ms := range rtt {
		fmt.Printf("round trip to the gateway (region %s): %d ms\n", region, ms)
	}
	fmt.Printf("searching for a match of %q\n", mode)
	s, err := c.FindMatch(ctx, client.FindMatchOptions{Mode: mode, RTT: rtt})
	if err != nil {
		return client.Found{}, err
	}
	defer s.Cancel()
	for u := range s.Updates() {
		fmt.Printf("  %s\n", u)
		switch u := u.(type) {
		case client.Found:
			return u, nil
		case client.TimedOut, client.Cancelled:
			return client.Found{}, fmt.Errorf("no match: %s", u)
		}
	}
	return client.Found{}, fmt.Errorf("the search ended without a match: %v", s.Err())
}

// play joins gameID and plays it for playFor, then prints what it measured.
func play(ctx context.Context, c *client.Client, gameID string, mode client.Mode, playFor time.Duration) error {
	t0 := time.Now()
	s, err := c.Play(ctx, gameID, mode) // snapshots: fetches, verifies and compiles the module first
	if err != nil {
		return err
	}
	defer s.Close()
	g := s.Game()
	fmt.Printf("game %s on %s, slot %d, module %s (snapshot format %q, %s inputs)\n",
		g.GameId, g.NodeId, s.Slot(), g.BuildId[:min(12, len(g.BuildId))], g.SnapshotFormat, g.InputKind)
	fmt.Printf("playing in %v mode (asked %v) after %v of setup\n", s.Mode(), mode, time.Since(t0).Round(time.Millisecond))
	if err := s.Fallback(); err != nil {
		fmt.Printf("  fell back to pixels: %v\n", err)
	}
	go func() {
		for n := range s.Notices() {
			fmt.Printf("  [%s] %s\n", time.Now().Format("15:04:05.000"), n)
		}
	}()

	// Phases: warm up, measure idle frames, turn left, stop turning.
	var (
		start       time.Time
		statsStart  client.Stats
		consumed    int
		renderTimes []time.Duration
		prev        *client.Frame
		idleDiffs   []int
		before      *client.Frame // the frame shown when the turn was sent
		turnID      uint64
		turnAck     *client.Ack
		turned      = -1
		pixels      int
	)
	end := time.After(playFor)
	turnAt := time.After(playFor / 2)
	for {
		select {
		case f, ok := <-s.Frames():
			if !ok {
				return fmt.Errorf("the session ended: %v", s.Err())
			}
			if start.IsZero() {
				start, statsStart = time.Now(), s.Stats()
			}
			consumed++
			if f.Local {
				renderTimes = append(renderTimes, f.RenderTime)
			}
			if _, _, _, px, err := f.Indexed8(); err == nil {
				pixels = len(px)
			}
			if prev != nil && before == nil {
				idleDiffs = append(idleDiffs, diff(prev.View, f.View))
			}
			if turnAck != nil && turned < 0 && f.Tick >= turnAck.Tick+10 {
				turned = diff(before.View, f.View)
				if _, err := s.Send([]byte{0}); err != nil { // release the key
					return err
				}
			}
			prev = f
		case <-turnAt:
			if prev == nil {
				// No frame yet to compare the turn against: try again soon.
				turnAt = time.After(50 * time.Millisecond)
				continue
			}
			before = prev
			if turnID, err = s.Send([]byte{arena.BtnTurnLeft}); err != nil {
				return err
			}
		case a, ok := <-s.Acks():
			if ok && turnAck == nil && turnID != 0 && a.Input >= turnID {
				turnAck = &a
			}
		case <-s.Done():
			return fmt.Errorf("the session ended: %v", s.Err())
		case <-end:
			return report(s, time.Since(start), statsStart, consumed, renderTimes, idleDiffs, turned, pixels, turnAck)
		}
	}
}

func report(s *client.Session, elapsed time.Duration, st0 client.Stats, consumed int, renderTimes []time.Duration, idleDiffs []int, turned, pixels int, ack *client.Ack) error {
	st := s.Stats()
	secs := elapsed.Seconds()
	fmt.Printf("\nmode %v, %.1f s\n", s.Mode(), secs)
	fmt.Printf("  frames shown:      %.1f /s (%d)\n", float64(consumed)/secs, consumed)
	fmt.Printf("  frames received:   %.1f /s (%d; %d keyframes, %d dropped for newer ones)\n",
		float64(st.FramesReceived-st0.FramesReceived)/secs, st.FramesReceived-st0.FramesReceived, st.Keyframes-st0.Keyframes, st.FramesDropped-st0.FramesDropped)
	fmt.Printf("  bytes received:    %.0f B/s (frame payloads, zstd deltas)\n", float64(st.BytesReceived-st0.BytesReceived)/secs)
	if len(renderTimes) > 0 {
		slices.Sort(renderTimes)
		fmt.Printf("  local render:      median %v, p99 %v per frame (%d frames)\n",
			renderTimes[len(renderTimes)/2].Round(time.Microsecond), renderTimes[len(renderTimes)*99/100].Round(time.Microsecond), len(renderTimes))
	} else {
		fmt.Printf("  local render:      none (the node draws the frames)\n")
	}
	if len(idleDiffs) > 0 {
		slices.Sort(idleDiffs)
		fmt.Printf("  idle frames:       median %d pixels changed between frames\n", idleDiffs[len(idleDiffs)/2])
	}
	switch {
	case turned >= 0:
		fmt.Printf("  turn left:         changed %d of %d pixels (acked in %v at tick %d)\n", turned, pixels, ack.Latency.Round(time.Millisecond), ack.Tick)
	case ack != nil:
		fmt.Printf("  turn left:         acked in %v, but no frame 10 ticks later arrived in time\n", ack.Latency.Round(time.Millisecond))
	default:
		fmt.Printf("  turn left:         not acknowledged in time\n")
	}
	if st.Reconnects > 0 || st.Migrations > 0 || st.RenderFailures > 0 {
		fmt.Printf("  reconnects %d, migrations %d, render failures %d\n", st.Reconnects, st.Migrations, st.RenderFailures)
	}
	return nil
}

// diff counts the bytes that differ between two views.
func diff(a, b []byte) int {
	n := 0
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			n++
		}
	}
	return n + max(len(a), len(b)) - min(len(a), len(b))
}
