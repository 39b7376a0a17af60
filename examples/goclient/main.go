// Command goclient plays the arena through a Ludus gateway with the native Go
// client (package ludus.dev/ludus/client): it signs in as a guest, creates an
// arena game with bots, plays it for a while in the chosen delivery mode —
// snapshots drawn locally by the arena module's own ludus_render in wazero, or
// pixels drawn by the sim node — turns left once, and prints what it measured:
//
//	go run ./cmd/ludus dev                      # in one terminal
//	go run ./examples/goclient -mode snapshots  # in another
//	go run ./examples/goclient -mode pixels
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
	gateway := flag.String("gateway", "http://127.0.0.1:8080", "gateway URL (as `ludus dev` serves it)")
	tenant := flag.String("tenant", "demo", "tenant slug")
	modeFlag := flag.String("mode", "snapshots", "delivery: snapshots, pixels or auto")
	seconds := flag.Float64("seconds", 10, "how long to play")
	bots := flag.Int("bots", 3, "bot players in the new game")
	cache := flag.String("cache", "", "directory for wazero's compiled code (default: compile in memory every run)")
	flag.Parse()
	mode, err := client.ParseMode(*modeFlag)
	if err != nil {
		log.Fatal(err)
	}
	if err := run(*gateway, *tenant, mode, time.Duration(*seconds*float64(time.Second)), *bots, *cache); err != nil {
		log.Fatal(err)
	}
}

func run(gateway, tenant string, mode client.Mode, playFor time.Duration, bots int, cache string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var opts []client.Option
	if cache != "" {
		opts = append(opts, client.WithCompilationCache(cache))
	}
	c := client.Dial(gateway, opts...)
	defer c.Close()

	host, _ := os.Hostname()
	acc, err := c.GuestLogin(ctx, tenant, client.NewDeviceID(), "goclient@"+host)
	if err != nil {
		return err
	}
	g, err := c.CreateGame(ctx, "arena", bots)
	if err != nil {
		return err
	}
	fmt.Printf("signed in as %s (%s); game %s on %s, module %s (snapshot format %q, %s inputs)\n",
		acc.DisplayName, acc.ID, g.GameId, g.NodeId, g.BuildId[:12], g.SnapshotFormat, g.InputKind)

	t0 := time.Now()
	s, err := c.Play(ctx, g.GameId, mode) // snapshots: fetches, verifies and compiles the module first
	if err != nil {
		return err
	}
	defer s.Close()
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
