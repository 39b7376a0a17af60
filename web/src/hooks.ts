// Figures about drawing that tests (web/e2e/play.mjs, e2e/*_test.go) and curious
// people read: window.ludus in the page, mirrored on the canvas as data-mode,
// data-frames and data-render-ms.

import type { ModuleMeta } from "./meta";

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
   * in the worker (snapshot to pixels on its canvas) with snapshots, on the page
   * (indexed8 to the canvas) with pixels. null before the first frame.
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
  route: () => "",
  search: "",
  found: null,
};

(globalThis as unknown as { ludus: Hooks }).ludus = hooks;

export const RENDER_SAMPLES = 512;

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
}
