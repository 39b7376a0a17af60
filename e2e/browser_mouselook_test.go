package e2e

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/ops/devstack"
)

// arenaTurnPerTick is the most the arena turns a player in a tick, by keys or
// mouse (games/arena turnSpeed, in 65536ths of a turn).
const arenaTurnPerTick = 800

// TestBrowserMouseLook drives mouse look on the play page in headless Chromium
// (web/e2e/mouselook.mjs), in both delivery modes, and watches the player's
// heading on the server through the game's spectator snapshots: a click locks
// the pointer (headless Chromium grants pointer lock, and synthetic mouse moves
// carry movementX), 200 px of movement turns the player by exactly the aim the
// page sent, never faster than the turn keys, the mouse button fires, and once
// the pointer is released moving the mouse turns nothing.
func TestBrowserMouseLook(t *testing.T) {
	chromium, artifacts := browserSetup(t)
	for _, mode := range []string{"snapshots", "pixels"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			s := startBrowserScript(t, ctx, chromium, "mouselook.mjs", nil, stack.GatewayURL+"/", artifacts, mode)
			var out []string
			var w *headingWatch
			var start uint16 // the heading before the mouse moved
			var turnedAt int
			reply := func(line string) { fmt.Fprintln(s.stdin, line) }
			sc := bufio.NewScanner(s.stdout)
			for sc.Scan() {
				line := sc.Text()
				out = append(out, line)
				f := strings.Fields(line)
				switch {
				case len(f) == 3 && f[0] == "GAME":
					slot, err := strconv.Atoi(f[2])
					if err != nil || slot < 0 || slot > 7 {
						reply("failed: bad slot")
						t.Errorf("bad slot in %q", line)
						continue
					}
					w = watchHeading(ctx, t, f[1], slot)
					h, err := w.steady(ctx, 600*time.Millisecond)
					if err != nil {
						reply("failed")
						t.Errorf("heading before mouse look: %v", err)
						continue
					}
					start = h
					reply("ready")
				case len(f) == 2 && f[0] == "AIM" && w != nil:
					aim, _ := strconv.Atoi(f[1])
					want := start + uint16(aim)
					if err := w.reach(ctx, want, 15*time.Second); err != nil {
						reply("failed")
						t.Errorf("heading after an aim of %d: %v", aim, err)
						continue
					}
					turnedAt = w.len()
					reply("turned")
				case line == "RELEASED" && w != nil:
					time.Sleep(700 * time.Millisecond)
					if h, _ := w.latest(); h != start+uint16(aimOf(out)) {
						reply("failed")
						t.Errorf("after release the heading is %d, want it unchanged at %d", h, start+uint16(aimOf(out)))
						continue
					}
					reply("ok")
				}
			}
			err := s.cmd.Wait()
			t.Logf("%s\n%s", strings.Join(out, "\n"), s.stderr.String())
			if err != nil {
				t.Fatalf("mouse look e2e (%s) failed: %v", mode, err)
			}
			if w == nil || turnedAt == 0 {
				t.Fatal("the script never got to turning")
			}
			// Never faster than the keys: between two snapshots the heading
			// moves at most arenaTurnPerTick a tick; 3200 takes at least 4 ticks.
			samples := w.all()
			first, last := -1, -1
			for i := 1; i < len(samples); i++ {
				a, b := samples[i-1], samples[i]
				d := int(int16(b.heading - a.heading))
				if d != 0 && first < 0 {
					first = i - 1
				}
				if d != 0 {
					last = i
				}
				if ticks := int(b.tick - a.tick); d > arenaTurnPerTick*ticks || d < -arenaTurnPerTick*ticks {
					t.Errorf("heading moved %d in %d ticks (tick %d): faster than %d a tick", d, ticks, b.tick, arenaTurnPerTick)
				}
			}
			if first < 0 {
				t.Fatal("the heading never moved")
			}
			aim := aimOf(out)
			if ticks := samples[last].tick - samples[first].tick; ticks < int64((aim+arenaTurnPerTick-1)/arenaTurnPerTick) {
				t.Errorf("an aim of %d turned in %d ticks: faster than the keys", aim, ticks)
			}
			t.Logf("heading %d → %d over ticks %d..%d (%d snapshots)", start, samples[last].heading, samples[first].tick, samples[last].tick, len(samples))
		})
	}
}

// aimOf is the aim the script reported ("AIM n"), 0 before it did.
func aimOf(lines []string) int {
	for _, l := range lines {
		if v, ok := strings.CutPrefix(l, "AIM "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

type headingSample struct {
	tick    int64
	heading uint16
}

// headingWatch follows one player's heading in a game's spectator snapshots
// (games/arena/snapshot.go: player entries of 34 bytes from offset 16, the
// heading at +2).
type headingWatch struct {
	mu      sync.Mutex
	samples []headingSample
	err     error
	changed chan struct{} // closed and replaced on every sample
}

func watchHeading(ctx context.Context, t *testing.T, gameID string, slot int) *headingWatch {
	t.Helper()
	w := &headingWatch{changed: make(chan struct{})}
	spectator := login(t, protocols()[0], devstack.DemoTenant)
	go func() {
		err := func() error {
			s, err := spectator.games.Spectate(ctx, connect.NewRequest(&ludusv1.SpectateRequest{GameId: gameID,
				Delivery: ludusv1.Delivery_DELIVERY_SNAPSHOTS, AcceptEncodings: []ludusv1.FrameEncoding{ludusv1.FrameEncoding_FRAME_ENCODING_RAW}}))
			if err != nil {
				return err
			}
			defer s.Close()
			for s.Receive() {
				f := s.Msg().GetFrame()
				if f == nil {
					continue
				}
				v := f.View
				e := 16 + slot*34
				if len(v) < e+4 || string(v[:4]) != "ARS1" || v[4] != 2 {
					return fmt.Errorf("tick %d: not an arena spectator snapshot (%d bytes)", f.Tick, len(v))
				}
				if v[e]&1 == 0 {
					continue // the player is not in the snapshot yet
				}
				w.add(headingSample{tick: f.Tick, heading: binary.LittleEndian.Uint16(v[e+2:])})
			}
			if err := s.Err(); err != nil && ctx.Err() == nil {
				return err
			}
			return io.EOF
		}()
		w.mu.Lock()
		w.err = err
		close(w.changed)
		w.mu.Unlock()
	}()
	return w
}

func (w *headingWatch) add(s headingSample) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.samples = append(w.samples, s)
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *headingWatch) latest() (uint16, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.samples) == 0 {
		return 0, false
	}
	return w.samples[len(w.samples)-1].heading, true
}

func (w *headingWatch) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.samples)
}

func (w *headingWatch) all() []headingSample {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]headingSample(nil), w.samples...)
}

// wait blocks until the next sample (or the stream's end, or ctx's).
func (w *headingWatch) wait(ctx context.Context, until time.Time) error {
	w.mu.Lock()
	ch, err := w.changed, w.err
	w.mu.Unlock()
	if err != nil {
		return fmt.Errorf("spectator stream ended: %w", err)
	}
	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	select {
	case <-ch:
		return nil
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// steady returns the heading once it has not changed for d.
func (w *headingWatch) steady(ctx context.Context, d time.Duration) (uint16, error) {
	end := time.Now().Add(20 * time.Second)
	var since time.Time
	var last uint16
	seen := false
	for time.Now().Before(end) {
		if h, ok := w.latest(); ok {
			if !seen || h != last {
				last, since, seen = h, time.Now(), true
			} else if time.Since(since) >= d {
				return h, nil
			}
		}
		if err := w.wait(ctx, time.Now().Add(100*time.Millisecond)); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("no steady heading within 20 s (latest %d, seen %v)", last, seen)
}

// reach waits until the heading is want.
func (w *headingWatch) reach(ctx context.Context, want uint16, within time.Duration) error {
	end := time.Now().Add(within)
	for time.Now().Before(end) {
		if h, ok := w.latest(); ok && h == want {
			return nil
		}
		if err := w.wait(ctx, end); err != nil {
			return err
		}
	}
	h, _ := w.latest()
	return fmt.Errorf("heading %d, want %d within %v", h, want, within)
}
