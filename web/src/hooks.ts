// Figures about drawing that tests (web/e2e/play.mjs, e2e/*_test.go) and curious
// people read: window.ludus in the page, mirrored on the canvas as data-mode,
// data-frames and data-render-ms.

import type { MouseState } from "./input";
import type { ModuleMeta } from "./meta";
import type { Upstream } from "./render";

export type Mode = "snapshots" | "pixels";

/** The SHA-256 of the indexed8 frame last drawn, and its tick. */
export interface FrameHash {
  mode: Mode;
  /** The frame's tick, as a decimal string (-1 when unknown). */
  tick: string;
  /** Lowercase hex SHA-256 of the whole indexed8 view (header, palette, pixels). */
  sha256: string;
  /** Bytes hashed. */
  size: number;
}

export interface Hooks {
  /** What the current stream delivers ("" before a match). */
  mode: Mode | "";
  /** Why the page draws pixels when it could have rendered snapshots ("" otherwise). */
  why: string;
  /** Frames drawn on the canvas since the match view opened. */
  framesDrawn: number;
  /**
   * Median milliseconds to render one frame over the last RENDER_SAMPLES frames:
   * in the worker (snapshot to pixels on its canvas) with snapshots; with pixels
   * indexed8 to the canvas (the palette lookup, in the worker when it decodes, and
   * the page's draw). null before the first frame.
   */
  renderMsMedian: number | null;
  /** How many frames renderMsMedian is the median of. */
  renderSamples: number;
  /** With snapshots: the part of renderMsMedian spent in the module (ludus_render). */
  moduleMsMedian: number | null;
  /** The hash of the frame last drawn (null before one is). */
  lastFrame: () => Promise<FrameHash | null>;
  /** The module metadata the page presents the match with (null before the first Status). */
  meta: ModuleMeta | null;
  /**
   * Presents the open match as if its stream's Status carried this module_meta JSON
   * (tests of modules other than the arena, and of servers that send none); false
   * when no match is open or the JSON is not an object.
   */
  applyMeta: (json: string) => boolean;
  /** The last round trip to the gateway (Ping), in milliseconds. */
  rttMs: number | null;
  /** Migrations seen by the open match, and how long the last one took. */
  migrations: number;
  lastMigrationMs: number | null;
  /** Current input payload mask (held controls). */
  inputMask: number;
  /** The bytes of the input payload last handed to the sender (mask, then aim and lock with mouse look). */
  inputPayload: number[];
  /** Mouse look: "" (no match), "none" (not asked for), "ready", "locked" or "refused". */
  mouse: MouseState | "";
  /** The aim total (65536ths of a turn since the lock) the last payload carried; 0 without mouse look. */
  aim: number;
  /** Where the current stream's frames are decoded: "main" (the page) or "worker" ("" before a stream). */
  decodeOn: "main" | "worker" | "";
  /** Why pixels are decoded on the page ("" when in the worker, or for snapshots). */
  decodeWhy: string;
  /**
   * What drawing a frame costs this page, over the last RENDER_SAMPLES frames
   * (null before the first frame drawn): see FrameCosts.
   */
  frameCosts: FrameCosts | null;
  /** The view shown: "lobby", "play:ID", "spectate:ID", "party:CODE" ("" before the first). */
  route: () => string;
  /**
   * The lobby's match search: "" (none yet), "searching", "found", "timed_out",
   * "cancelled" (by the server), "stopped" (Cancel) or "error".
   */
  search: string;
  /** What the last search found: the game, the team and slot (0-based), the region. */
  found: { gameId: string; team: number; slot: number; region: string } | null;
}

export const hooks: Hooks = {
  mode: "",
  why: "",
  framesDrawn: 0,
  renderMsMedian: null,
  renderSamples: 0,
  moduleMsMedian: null,
  lastFrame: () => Promise.resolve(null),
  meta: null,
  applyMeta: () => false,
  rttMs: null,
  migrations: 0,
  lastMigrationMs: null,
  inputMask: 0,
  inputPayload: [],
  mouse: "",
  aim: 0,
  decodeOn: "",
  decodeWhy: "",
  frameCosts: null,
  route: () => "",
  search: "",
  found: null,
};

(globalThis as unknown as { ludus: Hooks }).ludus = hooks;

export const RENDER_SAMPLES = 512;

/**
 * Milliseconds per frame drawn, by stage, medians and 95th percentiles
 * (performance.now around each stage). decode: the frame codec, from the stream's
 * message to the view (inflating deltas included; wall time, so on the page it
 * also counts what the page did while the browser inflated); on the page for
 * snapshots, in the render worker for pixels where the browser can (hooks.decodeOn).
 * worker: the render worker's other work, to an ImageBitmap (the module's render
 * with snapshots, the palette lookup with pixels; 0 when pixels are decoded on the
 * page). draw: the page's paint, from the newest view to the canvas (drawImage of
 * the worker's bitmap, or indexed8 → RGBA → putImageData). frame = decode + worker
 * + the page's hand-off to the worker + draw; main = the main thread's share: its
 * decoding or the hand-off, and the draw.
 */
export interface FrameCosts {
  /** Frames drawn the figures are over. */
  samples: number;
  decodeMsP50: number;
  decodeMsP95: number;
  workerMsP50: number;
  workerMsP95: number;
  drawMsP50: number;
  drawMsP95: number;
  frameMsP50: number;
  frameMsP95: number;
  mainMsP50: number;
  mainMsP95: number;
}

/** The last RENDER_SAMPLES render times and their median. */
export class RenderTimes {
  private readonly samples = new Float64Array(RENDER_SAMPLES);
  private n = 0;
  private next = 0;

  add(ms: number): void {
    this.samples[this.next] = ms;
    this.next = (this.next + 1) % RENDER_SAMPLES;
    this.n = Math.min(this.n + 1, RENDER_SAMPLES);
  }

  reset(): void {
    this.n = 0;
    this.next = 0;
  }

  get count(): number {
    return this.n;
  }

  median(): number | null {
    if (this.n === 0) return null;
    const s = this.samples.slice(0, this.n).sort();
    const mid = this.n >> 1;
    return this.n % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
  }

  /** The q-quantile (0 < q < 1) by the nearest rank; null without samples. */
  quantile(q: number): number | null {
    if (this.n === 0) return null;
    const s = this.samples.slice(0, this.n).sort();
    return s[Math.min(this.n - 1, Math.max(0, Math.ceil(q * this.n) - 1))]!;
  }
}

/** The samples behind FrameCosts: one RenderTimes per stage. */
export class FrameTimes {
  readonly decode = new RenderTimes();
  readonly worker = new RenderTimes();
  readonly draw = new RenderTimes();
  readonly frame = new RenderTimes();
  readonly main = new RenderTimes();

  /** One frame drawn: what came before the draw (render.ts Upstream), and the draw. */
  add(up: Upstream, drawMs: number): void {
    this.decode.add(up.decodeMs);
    this.worker.add(up.workerMs);
    this.draw.add(drawMs);
    this.frame.add(up.decodeMs + up.workerMs + up.handoffMs + drawMs);
    this.main.add((up.decodeOnPage ? up.decodeMs : 0) + up.handoffMs + drawMs);
  }

  reset(): void {
    for (const t of [this.decode, this.worker, this.draw, this.frame, this.main]) t.reset();
  }

  costs(): FrameCosts | null {
    if (this.frame.count === 0) return null;
    const q = (t: RenderTimes, p: number): number => t.quantile(p) ?? 0;
    return {
      samples: this.frame.count,
      decodeMsP50: q(this.decode, 0.5),
      decodeMsP95: q(this.decode, 0.95),
      workerMsP50: q(this.worker, 0.5),
      workerMsP95: q(this.worker, 0.95),
      drawMsP50: q(this.draw, 0.5),
      drawMsP95: q(this.draw, 0.95),
      frameMsP50: q(this.frame, 0.5),
      frameMsP95: q(this.frame, 0.95),
      mainMsP50: q(this.main, 0.5),
      mainMsP95: q(this.main, 0.95),
    };
  }
}
