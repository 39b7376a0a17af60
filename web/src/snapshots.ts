// The render worker, the page's side. Snapshot delivery (SnapshotRenderer): a
// render worker (renderworker.ts, bundled as dist/render-worker.js) runs the game
// module's ludus_render on each snapshot
// and answers with the frame as an ImageBitmap, which the page's Renderer draws on
// the next animation frame. One snapshot is in the worker at a time; while it
// renders, only the newest snapshot waits (older ones are dropped, as frames are).
//
// A watchdog guards the worker: no answer to a render within RENDER_TIMEOUT_MS
// (or to loading within LOAD_TIMEOUT_MS) terminates it, and onFail tells the match,
// which goes back to pixels. So do a trap, a failed fetch and a hash mismatch.
//
// Pixel delivery (PixelWorker): the same worker script, without a module, decodes
// a pixel stream's frames off the main thread and answers with ImageBitmaps; the
// page decodes on its main thread where it cannot (see PixelWorker).

import type { EncodedFrame } from "./codec";
import type { FromWorker, HashReply, ToWorker } from "./workerproto";

/** A render that takes longer than this stops the worker (then pixels). */
export const RENDER_TIMEOUT_MS = 250;
/** Fetching, verifying, compiling and initialising the module. */
export const LOAD_TIMEOUT_MS = 20_000;
/**
 * A watchdog that fires looks again after this long before it terminates the
 * worker, so that an answer already queued behind a busy page is not missed.
 */
const RECHECK_MS = 50;

/** Why this browser cannot render snapshots, or "" when it can. */
export function snapshotSupport(): string {
  if (typeof WebAssembly !== "object" || typeof WebAssembly.instantiate !== "function") return "this browser has no WebAssembly";
  if (typeof Worker !== "function") return "this browser has no Web Workers";
  if (typeof OffscreenCanvas !== "function") return "this browser has no OffscreenCanvas";
  if (!globalThis.isSecureContext || !globalThis.crypto?.subtle) {
    return "the page is not a secure context (https or localhost), so the module's hash cannot be checked";
  }
  return "";
}

/** The URL of the module's bytes on the gateway serving this page. */
export function moduleUrl(buildId: string): string {
  return new URL(`/modules/${buildId}.wasm`, location.origin).href;
}

export interface SnapshotOptions {
  /** The session ticket at the time the module is fetched. */
  ticket: () => string;
  /**
   * A frame is ready to draw: give it to the Renderer, which closes it. ms is the
   * worker's time, moduleMs its ludus_render part, decodeMs what the page spent
   * decoding the snapshot (as submitted).
   */
  onFrame: (bitmap: ImageBitmap, tick: bigint, ms: number, moduleMs: number, decodeMs: number) => void;
  /** The worker is gone (see the class comment); reason is for people. */
  onFail: (reason: string) => void;
  /** The module is loaded (sizes and milliseconds, for the curious). */
  onReady?: (info: { bytes: number; fetchMs: number; compileMs: number; initMs: number }) => void;
  /** The worker script, relative to the page's bundle. */
  workerUrl?: string | URL;
}

export class SnapshotRenderer {
  private worker: Worker | null = null;
  private buildId = "";
  private ready = false;
  private closed = false;
  private pending: { tick: bigint; view: Uint8Array; decodeMs: number } | null = null;
  private inFlight = -1; // seq of the render the worker has, or -1
  private inFlightDecodeMs = 0;
  private seq = 0;
  private timer = 0;
  private readonly hashes = new Map<number, (r: HashReply | null) => void>();

  constructor(private readonly o: SnapshotOptions) {}

  /** The build id whose module is loaded or loading ("" before load). */
  get module(): string {
    return this.buildId;
  }

  get loaded(): boolean {
    return this.ready;
  }

  /** Starts the worker on a module; a different build id restarts it. */
  load(buildId: string): void {
    if (this.closed || buildId === this.buildId) return;
    this.stopWorker();
    this.buildId = buildId;
    if (!/^[0-9a-f]{64}$/.test(buildId)) {
      this.failed(`the stream names no valid module build id (${JSON.stringify(buildId)})`);
      return;
    }
    let w: Worker;
    try {
      w = new Worker(this.o.workerUrl ?? new URL("render-worker.js", import.meta.url));
    } catch (err) {
      this.failed(`the render worker did not start: ${err instanceof Error ? err.message : String(err)}`);
      return;
    }
    this.worker = w;
    w.onmessage = (e: MessageEvent<FromWorker>) => this.onMessage(w, e.data);
    w.onerror = (e) => {
      e.preventDefault();
      if (w === this.worker) this.failed(`the render worker failed: ${e.message || "script error"}`);
    };
    w.onmessageerror = () => {
      if (w === this.worker) this.failed("the render worker sent a message that could not be read");
    };
    this.post({ type: "init", url: moduleUrl(buildId), buildId, ticket: this.o.ticket() });
    this.arm(LOAD_TIMEOUT_MS, `the game's renderer did not load within ${LOAD_TIMEOUT_MS / 1000} s`);
  }

  /** Queues a snapshot; the view is copied, so the caller may keep it. */
  submit(tick: bigint, view: Uint8Array, decodeMs = 0): void {
    if (this.closed) return;
    this.pending = { tick, view, decodeMs };
    this.pump();
  }

  /** The SHA-256 of the last frame the worker rendered (null without a worker). */
  hash(): Promise<HashReply | null> {
    const w = this.worker;
    if (!w || !this.ready) return Promise.resolve(null);
    const seq = ++this.seq;
    return new Promise((resolve) => {
      this.hashes.set(seq, resolve);
      this.post({ type: "hash", seq });
    });
  }

  close(): void {
    this.closed = true;
    this.stopWorker();
  }

  private post(msg: ToWorker, transfer: Transferable[] = []): void {
    this.worker?.postMessage(msg, transfer);
  }

  private pump(): void {
    if (!this.ready || this.inFlight >= 0 || !this.pending) return;
    const { tick, view, decodeMs } = this.pending;
    this.pending = null;
    const snapshot = view.slice().buffer; // the decoder keeps view as its next base
    const seq = ++this.seq;
    this.inFlight = seq;
    this.inFlightDecodeMs = decodeMs;
    this.post({ type: "render", seq, tick, snapshot }, [snapshot]);
    this.arm(RENDER_TIMEOUT_MS, `the game's renderer did not answer within ${RENDER_TIMEOUT_MS} ms (stopped)`);
  }

  private onMessage(w: Worker, m: FromWorker): void {
    if (w !== this.worker) {
      if (m.type === "frame") m.bitmap?.close();
      return;
    }
    switch (m.type) {
      case "ready":
        this.disarm();
        this.ready = true;
        this.o.onReady?.(m);
        this.pump();
        return;
      case "frame":
        if (m.seq !== this.inFlight) {
          m.bitmap?.close();
          return;
        }
        this.disarm();
        this.inFlight = -1;
        if (m.bitmap) this.o.onFrame(m.bitmap, m.tick, m.ms, m.wasmMs, this.inFlightDecodeMs);
        this.pump();
        return;
      case "hash": {
        const done = this.hashes.get(m.seq);
        this.hashes.delete(m.seq);
        done?.(m);
        return;
      }
      case "error": {
        const what = {
          fetch: "could not fetch the game's renderer",
          verify: "refused the game's renderer: its bytes are not its build",
          compile: "the game's renderer does not compile",
          initialize: "the game's renderer did not start",
          render: "the game's renderer failed",
        }[m.stage];
        this.failed(`${what}: ${m.message}`);
        return;
      }
    }
  }

  /** Starts the watchdog: no answer within ms (then RECHECK_MS) ends the worker. */
  private arm(ms: number, reason: string): void {
    this.disarm();
    this.timer = window.setTimeout(() => {
      this.timer = window.setTimeout(() => {
        this.timer = 0;
        this.failed(reason);
      }, RECHECK_MS);
    }, ms);
  }

  private disarm(): void {
    clearTimeout(this.timer);
    this.timer = 0;
  }

  private failed(reason: string): void {
    if (this.closed) return;
    this.close();
    this.o.onFail(reason);
  }

  private stopWorker(): void {
    this.disarm();
    this.worker?.terminate();
    this.worker = null;
    this.ready = false;
    this.inFlight = -1;
    this.pending = null;
    for (const done of this.hashes.values()) done(null);
    this.hashes.clear();
  }
}

/** Why this browser cannot decode pixel streams in a worker, or "" when it can. */
export function pixelWorkerSupport(): string {
  if (typeof Worker !== "function") return "this browser has no Web Workers";
  if (typeof createImageBitmap !== "function") return "this browser has no createImageBitmap";
  if (typeof DecompressionStream !== "function") return "this browser has no DecompressionStream";
  return "";
}

export interface PixelWorkerOptions {
  /**
   * A frame is ready to draw: give it to the Renderer, which closes it. decodeMs and
   * ms are the worker's (decoding; palette lookup and ImageBitmap), handoffMs the
   * page's main thread's (copying the frame and posting it).
   */
  onFrame: (bitmap: ImageBitmap, tick: bigint, decodeMs: number, ms: number, handoffMs: number) => void;
  /** A decoded view that is not indexed8 (for the overlay). */
  onProblem: (problem: string) => void;
  /** A frame did not decode: start the stream again (with a keyframe). */
  onDecodeError: (message: string) => void;
  /** The worker is gone: decode on the page from now on; reason is for people. */
  onFail: (reason: string) => void;
  /** The worker script, relative to the page's bundle. */
  workerUrl?: string | URL;
}

/**
 * PixelWorker decodes a pixel stream in the render worker: every frame goes to
 * the worker as it came (deltas need the frame before, so none is dropped on the
 * way), and the worker draws only the newest of those waiting, as the page's
 * Renderer does. It needs no watchdog: the worker runs no module, only the page's
 * own codec, and a frame that does not decode is reported like any other.
 *
 * Measured in headless Chromium (e2e/browser_perf_test.go, docs/BENCHMARKS.md):
 * decoding and palette lookup of the arena's 320×200 frames cost the page's main
 * thread 0.6-0.8 ms a frame (median) at full speed and 2.6-3.3 ms with the CPU
 * slowed down four times (a phone); with the worker the main thread's share, the
 * hand-off and drawImage, is 0.2-0.8 ms (0.8-1.4 ms slowed down).
 */
export class PixelWorker {
  private worker: Worker | null = null;
  private seq = 0;
  private closed = false;
  private readonly hashes = new Map<number, (r: HashReply | null) => void>();
  /** Hand-off milliseconds of the frames not answered yet, by seq. */
  private readonly handoff = new Map<number, number>();
  /** The last seq before the current stream: answers about older frames are stale. */
  private streamStart = 0;

  constructor(private readonly o: PixelWorkerOptions) {}

  /** Starts the worker; false (and onFail is not called) when it cannot start. */
  start(): boolean {
    if (this.worker) return true;
    if (this.closed) return false;
    let w: Worker;
    try {
      w = new Worker(this.o.workerUrl ?? new URL("render-worker.js", import.meta.url));
    } catch {
      return false;
    }
    this.worker = w;
    w.onmessage = (e: MessageEvent<FromWorker>) => this.onMessage(w, e.data);
    w.onerror = (e) => {
      e.preventDefault();
      if (w === this.worker) this.failed(`the decoding worker failed: ${e.message || "script error"}`);
    };
    w.onmessageerror = () => {
      if (w === this.worker) this.failed("the decoding worker sent a message that could not be read");
    };
    return true;
  }

  /** A new stream: its first frame is a keyframe. */
  reset(): void {
    this.streamStart = this.seq;
    this.post({ type: "reset" });
  }

  /** Hands one frame of the stream to the worker (its view is copied). */
  submit(f: EncodedFrame): void {
    if (!this.worker) return;
    const t0 = performance.now();
    const payload = f.view.slice().buffer; // Frame.view may share its buffer with the message
    const seq = ++this.seq;
    this.post({ type: "decode", seq, tick: f.tick, encoding: f.encoding, keyframe: f.keyframe, baseTick: f.baseTick, payload }, [payload]);
    this.handoff.set(seq, performance.now() - t0);
  }

  /** The hand-off time of frame seq; forgets it and every older one (not drawn, or drawn). */
  private takeHandoff(seq: number): number {
    const ms = this.handoff.get(seq) ?? 0;
    for (const k of this.handoff.keys()) if (k <= seq) this.handoff.delete(k);
    return ms;
  }

  /** The SHA-256 of the last frame the worker drew (null without a worker). */
  hash(): Promise<HashReply | null> {
    if (!this.worker) return Promise.resolve(null);
    const seq = ++this.seq;
    return new Promise((resolve) => {
      this.hashes.set(seq, resolve);
      this.post({ type: "hash", seq });
    });
  }

  close(): void {
    this.closed = true;
    this.worker?.terminate();
    this.worker = null;
    this.handoff.clear();
    for (const done of this.hashes.values()) done(null);
    this.hashes.clear();
  }

  private post(msg: ToWorker, transfer: Transferable[] = []): void {
    this.worker?.postMessage(msg, transfer);
  }

  private onMessage(w: Worker, m: FromWorker): void {
    if (w !== this.worker) {
      if (m.type === "frame") m.bitmap?.close();
      return;
    }
    switch (m.type) {
      case "frame": {
        const handoffMs = this.takeHandoff(m.seq);
        if (m.bitmap) this.o.onFrame(m.bitmap, m.tick, m.decodeMs ?? 0, m.ms, handoffMs);
        else if (m.problem) this.o.onProblem(m.problem);
        return;
      }
      case "decode-error":
        this.takeHandoff(m.seq);
        if (m.seq > this.streamStart) this.o.onDecodeError(m.message); // else: a stream already ended
        return;
      case "hash": {
        const done = this.hashes.get(m.seq);
        this.hashes.delete(m.seq);
        done?.(m);
        return;
      }
      case "error":
        this.failed(`the decoding worker failed: ${m.message}`);
        return;
    }
  }

  private failed(reason: string): void {
    if (this.closed) return;
    this.close();
    this.o.onFail(reason);
  }
}
