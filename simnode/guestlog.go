package simnode

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/simnode/engine"
)

// Guest logs: what a match's module writes to stdout and stderr, one line at a
// time (engine.OutputLine), stamped with the tick and the time and kept per
// match in a bounded ring on the node that runs it. Readers follow it live
// (NodeControlService.GameLogs, proxied to studios by fleet's GameLogService);
// the game's archive carries it once the game is over. A handoff or failover
// starts a new log on the new owner (seq from 1 again); lines of earlier
// owners stay on them until guestLogKeep has passed.

// Bounds of one match's guest log: the newest lines within both are kept, the
// older ones dropped and counted.
const (
	GuestLogLines = 1000
	GuestLogBytes = 256 << 10
	// guestLogKeep is how long a node keeps the log of a game that finished or
	// left it, for readers and the archive.
	guestLogKeep = 5 * time.Minute
	// guestLogBatch bounds the lines of one GameLogs message.
	guestLogBatch = 256
)

type guestLine struct {
	seq    uint64
	tick   int64
	at     time.Time
	stderr bool
	text   string
}

// guestLog is one match's ring of lines. The game's actor appends; any number
// of readers read.
type guestLog struct {
	mu sync.Mutex
	// ring grows to at most GuestLogLines entries (a quiet match costs
	// little); n lines from index head on, wrapping around.
	ring    []guestLine
	head, n int
	bytes   int
	next    uint64 // seq of the next line
	dropped uint64
	// wake is closed (and replaced) whenever a line is added or the log closes.
	wake chan struct{}
	// state is set once the game finished ("ended", "failed") or left the
	// node (StateMoved), with its message.
	state, message string
	closedAt       time.Time
	now            func() time.Time
}

func newGuestLog() *guestLog {
	return &guestLog{next: 1, wake: make(chan struct{}), now: time.Now}
}

// add is the instance's engine.OutputSink.
func (l *guestLog) add(o engine.OutputLine) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != "" {
		return
	}
	for l.n > 0 && (l.n == GuestLogLines || l.bytes+len(o.Text) > GuestLogBytes) {
		l.bytes -= len(l.ring[l.head].text)
		l.ring[l.head] = guestLine{}
		l.head = (l.head + 1) % len(l.ring)
		l.n--
		l.dropped++
	}
	line := guestLine{seq: l.next, tick: o.Tick, at: l.now(), stderr: o.Stderr, text: o.Text}
	if l.n == len(l.ring) {
		// Full but below GuestLogLines: unwrap, then grow.
		l.ring = append(append(make([]guestLine, 0, min(max(2*l.n, 16), GuestLogLines)), l.ring[l.head:]...), l.ring[:l.head]...)
		l.head = 0
		l.ring = append(l.ring, line)
	} else {
		l.ring[(l.head+l.n)%len(l.ring)] = line
	}
	l.n++
	l.next++
	l.bytes += len(o.Text)
	close(l.wake)
	l.wake = make(chan struct{})
}

// close records that the game finished or left the node; later lines are
// ignored.
func (l *guestLog) close(state, message string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != "" {
		return
	}
	l.state, l.message, l.closedAt = state, message, l.now()
	close(l.wake)
	l.wake = make(chan struct{})
}

// finished reports whether the game ended or failed here (not moved).
func (l *guestLog) finished() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state != "" && l.state != StateMoved
}

// guestLogPage is what read returns.
type guestLogPage struct {
	lines          []guestLine
	skipped        uint64 // lines after `after` no longer kept
	dropped        uint64
	more           bool // lines beyond this page are kept
	state, message string
	wake           <-chan struct{}
}

// read returns up to max lines with seq > after.
func (l *guestLog) read(after uint64, max int) guestLogPage {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := guestLogPage{dropped: l.dropped, state: l.state, message: l.message, wake: l.wake}
	first := l.next - uint64(l.n) // seq of the oldest kept line
	if after+1 < first {
		p.skipped = first - after - 1
		after = first - 1
	}
	for i := int(after + 1 - first); i < l.n; i++ {
		if len(p.lines) == max {
			p.more = true
			break
		}
		p.lines = append(p.lines, l.ring[(l.head+i)%len(l.ring)])
	}
	return p
}

// snapshot returns the whole log as an archive keeps it.
func (l *guestLog) snapshot() *ludusv1.GuestLog {
	p := l.read(0, GuestLogLines)
	return &ludusv1.GuestLog{Lines: lineProtos(p.lines), Dropped: p.dropped}
}

func lineProtos(ls []guestLine) []*ludusv1.GuestLogLine {
	out := make([]*ludusv1.GuestLogLine, len(ls))
	for i, l := range ls {
		out[i] = &ludusv1.GuestLogLine{Seq: l.seq, Tick: l.tick, Time: timestamppb.New(l.at), Stderr: l.stderr, Text: l.text}
	}
	return out
}

// guestLogTable is a node's guest logs: of its games, and of games that
// finished or left it less than guestLogKeep ago.
type guestLogTable struct {
	mu   sync.Mutex
	logs map[string]*guestLog
}

func newGuestLogTable() *guestLogTable { return &guestLogTable{logs: map[string]*guestLog{}} }

func (n *Node) guestLogs() *guestLogTable { return n.guestLogTab }

// put makes l the log of the game key, replacing an older one (a game that
// came back to this node), and forgets logs kept long enough.
func (t *guestLogTable) put(key string, l *guestLog) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	for k, o := range t.logs {
		o.mu.Lock()
		old := o.state != "" && now.Sub(o.closedAt) > guestLogKeep
		o.mu.Unlock()
		if old {
			delete(t.logs, k)
		}
	}
	t.logs[key] = l
}

func (t *guestLogTable) get(key string) *guestLog {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.logs[key]
}

// GameLogs streams a game's guest log (NodeControlService).
func (c *control) GameLogs(ctx context.Context, req *connect.Request[clusterv1.GameLogsRequest], stream *connect.ServerStream[clusterv1.GameLogsResponse]) error {
	m := req.Msg
	l := c.n.guestLogs().get(gameKey(m.TenantId, m.GameId))
	if l == nil {
		return connectError(nodeErrorf(errNotHere, "node %s has no guest log of game %q", c.n.cfg.ID, m.GameId))
	}
	after, first := m.AfterSeq, true
	for {
		p := l.read(after, guestLogBatch)
		if len(p.lines) > 0 {
			after = p.lines[len(p.lines)-1].seq
		}
		final := p.state != "" && !p.more
		if first || len(p.lines) > 0 || p.skipped > 0 || final {
			resp := &ludusv1.GameLogsResponse{Lines: lineProtos(p.lines), Skipped: p.skipped, Dropped: p.dropped, NodeId: c.n.cfg.ID}
			if final {
				resp.State, resp.Message = p.state, p.message
			}
			if err := stream.Send(&clusterv1.GameLogsResponse{Log: resp}); err != nil {
				return err
			}
			first = false
		}
		if p.more {
			continue
		}
		if final || !m.Follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-p.wake:
		}
	}
}

// tickHandler adds the game's current tick to every record of a match's
// logger that does not carry one, so every line the node writes about a match
// names tenant, game, build, tick and node.
type tickHandler struct {
	slog.Handler
	tick *atomic.Int64
}

func (h tickHandler) Handle(ctx context.Context, r slog.Record) error {
	has := false
	r.Attrs(func(a slog.Attr) bool {
		has = a.Key == "tick"
		return !has
	})
	if !has {
		r = r.Clone()
		r.AddAttrs(slog.Int64("tick", h.tick.Load()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h tickHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return tickHandler{Handler: h.Handler.WithAttrs(as), tick: h.tick}
}

func (h tickHandler) WithGroup(name string) slog.Handler {
	return tickHandler{Handler: h.Handler.WithGroup(name), tick: h.tick}
}
