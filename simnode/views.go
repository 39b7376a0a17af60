package simnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/simnode/engine"
)

// Delivery modes of a stream (ludus.v1.Status.delivery).
const (
	deliverySnapshots = "snapshots"
	deliveryPixels    = "pixels"
)

// errNoRenderer refuses snapshots of a module whose views are already pixels.
var errNoRenderer = errors.New("this game's module has no renderer (no snapshot_format in its metadata), so it can only stream pixels: ask for DELIVERY_PIXELS")

// feed is one view of a game — a player's slot or the spectator camera — as
// the streams that watch it want it: snapshots (the client renders them with
// the module's ludus_render) published every tick, and pixels published every
// frame_divisor ticks. Pixel streams of one view share one render per frame;
// a module without a renderer publishes its views as pixels only.
type feed struct {
	pixels       *cell[Frame]
	snaps        *cell[Frame]
	pixelViewers atomic.Int32
	snapViewers  atomic.Int32
}

func newFeed() *feed { return &feed{pixels: newCell(Frame{}), snaps: newCell(Frame{})} }

// watched reports whether anyone would receive a view published now.
func (f *feed) watched() bool { return f.pixelViewers.Load() > 0 || f.snapViewers.Load() > 0 }

// stream returns the cell and viewer counter of a delivery mode.
func (f *feed) stream(snapshots bool) (*cell[Frame], *atomic.Int32) {
	if snapshots {
		return f.snaps, &f.snapViewers
	}
	return f.pixels, &f.pixelViewers
}

// wantSnapshots resolves a stream's requested delivery against the module:
// unset means pixels, snapshots need a renderer.
func wantSnapshots(spec clusterstate.GameSpec, d ludusv1.Delivery) (bool, error) {
	if d != ludusv1.Delivery_DELIVERY_SNAPSHOTS {
		return false, nil
	}
	if spec.SnapshotFormat == "" {
		return false, errNoRenderer
	}
	return true, nil
}

// DefaultMaxViewBytes is the largest view a node accepts from a module
// (Config.MaxViewBytes): the largest frame the clients decode (16 MiB,
// gateway/framecodec's DefaultMaxRawSize), a 4096×4096 view of one byte a
// pixel.
const DefaultMaxViewBytes = 16 << 20

// viewDrawer turns one instance's views into what a game's feeds publish. It
// belongs to the goroutine that owns the instance (a game's actor, a replica).
type viewDrawer struct {
	mod  *engine.Module
	spec clusterstate.GameSpec
	opts engine.InstanceOptions
	log  *slog.Logger
	// maxView is the largest view accepted (Config.MaxViewBytes).
	maxView int
	// rend renders snapshots for pixel streams, created when first needed; a
	// failed renderer is replaced, at most once per renderRetry.
	rend       *engine.Renderer
	rendFailed time.Time
}

// renderRetry spaces attempts to replace a renderer that failed.
const renderRetry = time.Second

// draw publishes f's views for tick: a snapshot when snapshot streams watch
// it, and, on frame ticks, pixels when pixel streams do.
func (d *viewDrawer) draw(ctx context.Context, inst *engine.Instance, f *feed, slot int, tick int64, frameTick bool) error {
	snapshots := d.spec.SnapshotFormat != ""
	wantSnap := snapshots && f.snapViewers.Load() > 0
	wantPix := frameTick && f.pixelViewers.Load() > 0
	if !wantSnap && !wantPix {
		return nil
	}
	v, err := inst.View(ctx, slot)
	if err != nil {
		return err // the authoritative instance failed: the match fails
	}
	if d.maxView > 0 && len(v) > d.maxView {
		return fmt.Errorf("ludus_view(%d) returned %d bytes; a view may be at most %d (docs/ABI.md)", slot, len(v), d.maxView)
	}
	if wantSnap {
		f.snaps.publish(Frame{Tick: tick, View: append([]byte(nil), v...)})
	}
	if !wantPix {
		return nil
	}
	if !snapshots {
		f.pixels.publish(Frame{Tick: tick, View: append([]byte(nil), v...)})
		return nil
	}
	px, err := d.render(ctx, v)
	if err != nil {
		return nil // logged in render; pixel streams skip this frame
	}
	f.pixels.publish(Frame{Tick: tick, View: append([]byte(nil), px...)})
	return nil
}

// render draws a snapshot with the game's renderer. A renderer that fails
// (trap, runaway) is dropped and replaced later: it never fails the match,
// because ludus_render is not part of the simulation.
func (d *viewDrawer) render(ctx context.Context, snap []byte) ([]byte, error) {
	if d.rend == nil {
		if time.Since(d.rendFailed) < renderRetry {
			return nil, errors.New("renderer unavailable")
		}
		r, err := d.mod.NewRenderer(ctx, d.opts)
		if err != nil {
			d.rendFailed = time.Now()
			d.log.Error("cannot start the module's renderer", "err", err)
			return nil, err
		}
		d.rend = r
	}
	px, err := d.rend.Render(ctx, snap)
	if err != nil {
		d.log.Error("the module's ludus_render failed; pixel streams skip frames until a new renderer starts",
			"err", err, "guest_output", d.rend.Output())
		d.rend.Close(ctx)
		d.rend, d.rendFailed = nil, time.Now()
		return nil, fmt.Errorf("render: %w", err)
	}
	return px, nil
}

// close frees the renderer.
func (d *viewDrawer) close() {
	if d.rend != nil {
		d.rend.Close(context.Background())
		d.rend = nil
	}
}
