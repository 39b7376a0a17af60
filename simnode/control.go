package simnode

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"ludus.dev/ludus/sdk/abi"
	"ludus.dev/ludus/simnode/inputlog"
)

// Who controls a player slot, and when a player is gone (docs/API.md,
// "Streams, controllers and abandoned games").
//
// A player's slot is controlled by one client stream at a time: the newest
// frame stream (StreamFrames of the player, the frame half of a gateway's
// Play) to attach takes the slot over, and the streams of the controller it
// replaces end with errReplaced; inputs that name a replaced controller are
// refused with it too. A player none of whose streams has been attached for
// Config.AbandonGrace leaves the match: the actor appends a leave event to
// the log, so replay and failover see the same leave at the same tick.

// ControllerHeader is the request header of NodeService.StreamFrames and
// NodeService.Inputs naming the client stream a call belongs to (a gateway
// makes one id per client stream: the frames and inputs of one Play share
// it, and a re-attach after a move keeps it). A call without it is a
// controller of its own. The gateway's copy is gateway.controllerHeader.
const ControllerHeader = "Ludus-Controller"

// errReplaced ends a player's stream when another stream of the same player
// takes the slot over, and refuses the inputs of the replaced stream
// (Aborted).
var errReplaced = errors.New("this player is now controlled from another window")

// maxReplaced is how many replaced controllers a slot remembers, to refuse
// their inputs.
const maxReplaced = 8

// localControllers numbers the controllers of calls that name none.
var localControllers atomic.Uint64

// newLocalController returns a controller id no gateway uses.
func newLocalController() string {
	return "node-" + strconv.FormatUint(localControllers.Add(1), 10)
}

// controller is one client stream's hold on a slot. streams counts its
// attached node streams (a gateway re-attaching overlaps the old one briefly).
type controller struct {
	id      string
	streams int
	// ended is closed when a newer controller takes the slot.
	ended chan struct{}
}

// slotControl tracks a slot's controllers. Streams attach and detach from their
// own goroutines; the actor sets the account (join, leave) and asks whether
// the player abandoned the slot. The mutex is held for a few field updates.
type slotControl struct {
	mu      sync.Mutex
	account string // the slot's player; "" while the slot is free
	cur     *controller
	// replaced are the ids of controllers replaced since the player joined,
	// newest last.
	replaced []string
	// idleSince is when the slot last had no attached stream (or the player
	// joined, or the game resumed on this node); zero while one is attached.
	idleSince time.Time
}

// join gives the slot to account (a join, or a takeover's restore).
func (c *slotControl) join(account string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.account, c.cur, c.replaced, c.idleSince = account, nil, nil, now
}

// leave frees the slot.
func (c *slotControl) leave() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.account, c.cur, c.replaced, c.idleSince = "", nil, nil, time.Time{}
}

// attach attaches a stream of controller id for account. A new id replaces
// the current controller, whose streams end (errReplaced).
func (c *slotControl) attach(account, id string) (*controller, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if account == "" || c.account != account {
		return nil, errNotJoined // the player left (abandoned) meanwhile
	}
	c.idleSince = time.Time{}
	if c.cur != nil && c.cur.id == id {
		c.cur.streams++
		return c.cur, nil
	}
	if c.cur != nil {
		close(c.cur.ended)
		c.replaced = append(c.replaced, c.cur.id)
		if len(c.replaced) > maxReplaced {
			c.replaced = c.replaced[1:]
		}
	}
	c.cur = &controller{id: id, streams: 1, ended: make(chan struct{})}
	return c.cur, nil
}

// detach detaches one stream of ctl; the slot is idle from now when it was
// the current controller's last.
func (c *slotControl) detach(ctl *controller, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctl.streams--
	if ctl == c.cur && ctl.streams == 0 {
		c.idleSince = now
	}
}

// refuses reports whether inputs of controller id are refused: it was
// replaced. Inputs naming no controller (unary SendInput) and controllers not
// attached yet (a Play's inputs may reach the node before its frames) pass.
func (c *slotControl) refuses(id string) bool {
	if id == "" {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil && c.cur.id == id {
		return false
	}
	for _, r := range c.replaced {
		if r == id {
			return true
		}
	}
	return false
}

// abandon frees the slot and reports true when its player has had no stream
// attached for grace. Checked and freed under one lock, so a stream
// attaching at that moment either keeps the slot or is refused.
func (c *slotControl) abandon(now time.Time, grace time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.account == "" || c.idleSince.IsZero() || now.Sub(c.idleSince) < grace {
		return false
	}
	c.account, c.cur, c.replaced, c.idleSince = "", nil, nil, time.Time{}
	return true
}

// attachPlayer attaches a stream of controller id (a new one if "") to
// account's slot: it returns the slot, the controller (detach it when the
// stream ends) and an error for a player without a slot.
func (g *game) attachPlayer(ctx context.Context, account, id string) (int, *controller, error) {
	reply := make(chan int, 1)
	if err := g.send(ctx, slotReq{account: account, reply: reply}); err != nil {
		return -1, nil, err
	}
	var slot int
	select {
	case slot = <-reply:
	case <-ctx.Done():
		return -1, nil, ctx.Err()
	}
	if slot < 0 {
		return -1, nil, errNotJoined
	}
	if id == "" {
		id = newLocalController()
	}
	ctl, err := g.slots[slot].ctl.attach(account, id)
	if err != nil {
		return -1, nil, err
	}
	return slot, ctl, nil
}

// detachPlayer ends a stream attached by attachPlayer.
func (g *game) detachPlayer(slot int, ctl *controller) {
	g.slots[slot].ctl.detach(ctl, g.n.cfg.Clock.Now())
}

// leave takes the player out of slot i: a leave event in the next step, so
// the log holds it. Inputs held for a gap are refused.
func (g *game) leave(i int) {
	s := g.slots[i]
	if s.account == "" {
		return
	}
	for seq, h := range s.held {
		h.reply <- inputResult{err: errNotJoined}
		delete(s.held, seq)
	}
	delete(g.accounts, s.account)
	s.account, s.name = "", ""
	g.players--
	ev := abi.Event{Kind: abi.EventLeave, Slot: uint8(i)}
	g.events = append(g.events, ev)
	g.entries = append(g.entries, inputlog.Entry{Event: ev})
}

// leaveAbandoned takes out every player who has had no stream attached for
// Config.AbandonGrace.
func (g *game) leaveAbandoned(now time.Time) {
	grace := g.n.cfg.AbandonGrace
	if grace <= 0 {
		return
	}
	for i, s := range g.slots {
		if s.account != "" && s.ctl.abandon(now, grace) {
			g.log.Info("player abandoned the game", "slot", i, "account", s.account, "grace", grace)
			g.leave(i)
		}
	}
}

// idleOver reports whether the game has had no player for Config.IdleEnd.
// emptySince starts when the actor starts (a game created or resumed with no
// player counts from then).
func (g *game) idleOver(now time.Time) bool {
	if g.players > 0 {
		g.emptySince = time.Time{}
		return false
	}
	if g.emptySince.IsZero() {
		g.emptySince = now
	}
	return g.n.cfg.IdleEnd > 0 && now.Sub(g.emptySince) >= g.n.cfg.IdleEnd
}

// idlePrefix starts the final message of a game ended for want of players.
const idlePrefix = "ended: no players for "

// idleMessage is the final message of a game ended after d without players.
func idleMessage(d time.Duration) string {
	return idlePrefix + strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
}
