// The render worker (bundled on its own as dist/render-worker.js): fetches a game
// module by build id, refuses it unless its SHA-256 is the build id, instantiates
// it with the deterministic WASI shim and turns each snapshot into RGBA with the
// module's ludus_render and a palette lookup table (a Uint32Array over ImageData's
// bytes). It answers every render with the frame as an ImageBitmap (or draws on an
// OffscreenCanvas the page transferred) and the time it took. See snapshots.ts for the page's side.
//
// It also decodes pixel streams off the page's main thread ("decode"; no module):
// the frame codec (codec.ts), then the same palette lookup and ImageBitmap.

import { FrameDecoder } from "./codec";
import { indexed8Size, PaletteLUT } from "./indexed8";
import { sha256Hex } from "./hash";
import { ModuleRenderer, RenderError } from "./modrender";
import type { DecodeRequest, FailStage, FromWorker, InitRequest, RenderRequest, ToWorker } from "./workerproto";

interface WorkerScope {
  postMessage(msg: FromWorker, transfer?: Transferable[]): void;
  onmessage: ((e: MessageEvent<ToWorker>) => void) | null;
}
const scope = self as unknown as WorkerScope;

let renderer: ModuleRenderer | null = null;
let loading: Promise<void> | null = null;
let failed = false;
/** A canvas the page transferred: frames are drawn on it, no bitmaps are sent. */
let canvas: OffscreenCanvas | null = null;
let ctx: OffscreenCanvasRenderingContext2D | null = null;
let image: ImageData | null = null;
let pixels = new Uint32Array(0);
const palette = new PaletteLUT();
/** A copy of the last frame rendered, for hash requests. */
let last: Uint8Array = new Uint8Array(0);
let lastTick = -1n;
/** The pixel stream's decoder, and how many of its frames wait behind the one being handled. */
const decoder = new FrameDecoder();
let decodesWaiting = 0;

class Stage extends Error {
  constructor(
    readonly stage: FailStage,
    message: string,
  ) {
    super(message);
  }
}

function fail(stage: FailStage, err: unknown, seq?: number): void {
  failed = true;
  renderer = null;
  const message = err instanceof Error ? err.message : String(err);
  scope.postMessage({ type: "error", stage: err instanceof Stage ? err.stage : stage, message, seq });
}

async function load(req: InitRequest): Promise<void> {
  if (!/^[0-9a-f]{64}$/.test(req.buildId)) throw new Stage("fetch", `bad build id ${JSON.stringify(req.buildId)}`);
  if (req.canvas) canvas = req.canvas;
  const t0 = performance.now();
  let bytes: Uint8Array;
  try {
    const headers: Record<string, string> = {};
    if (req.ticket) headers["Authorization"] = `Bearer ${req.ticket}`;
    const res = await fetch(req.url, { headers, credentials: "omit" });
    if (!res.ok) throw new Error(`HTTP ${res.status}${res.statusText ? ` ${res.statusText}` : ""}`);
    bytes = new Uint8Array(await res.arrayBuffer());
  } catch (err) {
    throw new Stage("fetch", err instanceof Error ? err.message : String(err));
  }
  const t1 = performance.now();
  const sum = await sha256Hex(bytes);
  if (sum !== req.buildId) {
    throw new Stage("verify", `its SHA-256 is ${sum.slice(0, 12)}…, not its build id ${req.buildId.slice(0, 12)}…`);
  }
  let mod: WebAssembly.Module;
  try {
    mod = await WebAssembly.compile(bytes as Uint8Array<ArrayBuffer>);
  } catch (err) {
    throw new Stage("compile", err instanceof Error ? err.message : String(err));
  }
  const t2 = performance.now();
  try {
    renderer = await ModuleRenderer.create(mod);
  } catch (err) {
    throw new Stage("initialize", err instanceof Error ? err.message : String(err));
  }
  const t3 = performance.now();
  scope.postMessage({ type: "ready", bytes: bytes.length, fetchMs: t1 - t0, compileMs: t2 - t1, initMs: t3 - t2 });
}

/**
 * Renders one snapshot into RGBA: into an ImageBitmap posted back to the page, or on
 * the canvas the page transferred. createImageBitmap(ImageData) costs ~0.2 ms a
 * 320×200 frame here, where putImageData on an OffscreenCanvas then
 * transferToImageBitmap took 1.5-2 ms in a live page (measured in headless
 * Chromium; see e2e/browser_render_test.go for both).
 */
async function render(req: RenderRequest): Promise<void> {
  const t0 = performance.now();
  const frame = renderer!.render(new Uint8Array(req.snapshot));
  const t1 = performance.now();
  const w = frame[4]! | (frame[5]! << 8);
  const h = frame[6]! | (frame[7]! << 8);
  const bitmap = await draw(frame, w, h);
  if (last.length !== frame.length) last = new Uint8Array(frame.length);
  last.set(frame); // frame aliases module memory: keep a copy
  lastTick = req.tick;
  const ms = performance.now() - t0;
  const sha256 = req.wantHash ? await sha256Hex(last) : undefined;
  const msg: FromWorker = { type: "frame", seq: req.seq, tick: req.tick, width: w, height: h, ms, wasmMs: t1 - t0, bitmap, sha256 };
  scope.postMessage(msg, bitmap ? [bitmap] : []);
}

/**
 * Decodes one frame of a pixel stream and, unless a newer one already waits,
 * draws it as render() draws a snapshot's frame. A frame that does not decode is
 * reported; the page starts the stream again (a keyframe resets the decoder).
 */
async function decode(req: DecodeRequest): Promise<void> {
  const t0 = performance.now();
  let view: Uint8Array;
  try {
    view = await decoder.frame({ ...req, view: new Uint8Array(req.payload) });
  } catch (err) {
    decoder.reset();
    scope.postMessage({ type: "decode-error", seq: req.seq, message: err instanceof Error ? err.message : String(err) });
    return;
  }
  const t1 = performance.now();
  if (decodesWaiting > 0) return; // only the newest is drawn, as on the page
  const size = indexed8Size(view);
  if (typeof size === "string") {
    scope.postMessage({ type: "frame", seq: req.seq, tick: req.tick, width: 0, height: 0, ms: 0, wasmMs: 0, decodeMs: t1 - t0, problem: size });
    return;
  }
  const bitmap = await draw(view, size.w, size.h);
  last = view; // decoded views are new arrays (codec.ts): safe to keep
  lastTick = req.tick;
  const msg: FromWorker = {
    type: "frame", seq: req.seq, tick: req.tick, width: size.w, height: size.h, ms: performance.now() - t1, wasmMs: 0, decodeMs: t1 - t0, bitmap,
  };
  scope.postMessage(msg, bitmap ? [bitmap] : []);
}

/** Draws a checked indexed8 frame: an ImageBitmap, or on the transferred canvas (then undefined). */
async function draw(frame: Uint8Array, w: number, h: number): Promise<ImageBitmap | undefined> {
  if (!image || image.width !== w || image.height !== h) {
    image = new ImageData(w, h);
    pixels = new Uint32Array(image.data.buffer);
  }
  palette.expand(frame, w * h, pixels);
  let bitmap: ImageBitmap | undefined;
  if (canvas) {
    if (!ctx) {
      ctx = canvas.getContext("2d", { alpha: false });
      if (!ctx) throw new RenderError("OffscreenCanvas 2D context is not available");
    }
    if (canvas.width !== w || canvas.height !== h) {
      canvas.width = w;
      canvas.height = h;
    }
    ctx.putImageData(image, 0, 0);
  } else {
    // Copies the pixels before it returns; the next render waits for it anyway.
    bitmap = await createImageBitmap(image);
  }
  return bitmap;
}

// Messages are handled one at a time, in order: a render waits for the module.
let queue: Promise<void> = Promise.resolve();

scope.onmessage = (e) => {
  const msg = e.data;
  if (msg.type === "decode") decodesWaiting++;
  queue = queue.then(() => handle(msg));
};

async function handle(msg: ToWorker): Promise<void> {
  if (msg.type === "decode") decodesWaiting--;
  if (failed) return;
  switch (msg.type) {
    case "reset":
      decoder.reset();
      return;
    case "decode":
      try {
        await decode(msg);
      } catch (err) {
        fail("render", err, msg.seq);
      }
      return;
    case "init":
      if (loading) return;
      loading = load(msg).catch((err: unknown) => fail("fetch", err));
      return loading;
    case "render":
      if (!renderer) return fail("render", "render before the module was loaded", msg.seq);
      try {
        await render(msg);
      } catch (err) {
        fail("render", err, msg.seq);
      }
      return;
    case "hash":
      scope.postMessage({ type: "hash", seq: msg.seq, tick: lastTick, sha256: await sha256Hex(last), size: last.length });
      return;
  }
}
