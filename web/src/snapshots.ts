// Snapshot delivery, the page's side: a render worker (renderworker.ts, bundled
// as dist/render-worker.js) runs the game module's ludus_render on each snapshot
// and answers with the frame as an ImageBitmap, which the page's Renderer draws on
// the next animation frame. One snapshot is in the worker at a time; while it
// renders, only the newest snapshot waits (older ones are dropped, as frames are).
//
// A watchdog guards the worker: no answer to a render within RENDER_TIMEOUT_MS
// (or to loading within LOAD_TIMEOUT_MS) terminates it, and onFail tells the match,
// which goes back to pixels. So do a trap, a failed fetch and a hash mismatch.

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
  /** A frame is ready to draw: give it to the Renderer, which closes it. */
  onFrame: (bitmap: ImageBitmap, tick: bigint, ms: number, moduleMs: number) => void;
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
  private pending: { tick: bigint; view: Uint8Array } | null = null;
  private inFlight = -1; // seq of the render the worker has, or -1
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
  submit(tick: bigint, view: Uint8Array): void {
    if (this.closed) return;
    this.pending = { tick, view };
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
    const { tick, view } = this.pending;
    this.pending = null;
    const snapshot = view.slice().buffer; // the decoder keeps view as its next base
    const seq = ++this.seq;
    this.inFlight = seq;
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
        if (m.bitmap) this.o.onFrame(m.bitmap, m.tick, m.ms, m.wasmMs);
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
