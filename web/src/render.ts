// Drawing views on the canvas: the indexed8 format, newest frame only, once per
// animation frame. Views come either as indexed8 bytes (pixels rendered by the
// node) or as ImageBitmaps the render worker made from snapshots (snapshots.ts).

import { indexed8Size, PaletteLUT } from "./indexed8";

export { INDEXED8 } from "./indexed8";

/** What a view cost before it reached the Renderer (hooks.ts, FrameCosts). */
export interface Upstream {
  /** The frame codec, on the page (decodeOnPage) or in the render worker. */
  decodeMs: number;
  decodeOnPage: boolean;
  /** The render worker's other work (render, palette lookup, ImageBitmap); 0 without it. */
  workerMs: number;
  /** The page handing the frame to the worker (pixels decoded there); 0 otherwise. */
  handoffMs: number;
}

const NO_COST: Upstream = { decodeMs: 0, decodeOnPage: true, workerMs: 0, handoffMs: 0 };

/**
 * Renderer keeps the newest submitted view and draws it on the next animation frame;
 * older views that were never drawn are dropped.
 */
export class Renderer {
  private readonly ctx: CanvasRenderingContext2D;
  private image: ImageData | null = null;
  private pixels = new Uint32Array(0);
  private readonly palette = new PaletteLUT();
  private latest: Uint8Array | ImageBitmap | null = null;
  private latestTick = -1n;
  private latestCost = NO_COST;
  private raf = 0;
  /** The indexed8 view last drawn by draw(), and its tick (-1 when unknown). */
  lastView: Uint8Array | null = null;
  lastTick = -1n;
  /** Called after each paint with why the view could not be drawn, or "" if it was. */
  onPaint: (problem: string) => void = () => {};
  /**
   * Called after each view drawn: its tick, the milliseconds drawing took and what
   * the view cost before (as submitted).
   */
  onDrawn: (tick: bigint, ms: number, upstream: Upstream) => void = () => {};

  constructor(readonly canvas: HTMLCanvasElement) {
    const ctx = canvas.getContext("2d", { alpha: false });
    if (!ctx) throw new Error("canvas 2D context is not available");
    this.ctx = ctx;
    ctx.fillStyle = "#000";
    ctx.fillRect(0, 0, canvas.width, canvas.height);
  }

  /** Queues a view; only the newest one queued before the next paint is drawn. */
  submit(view: Uint8Array | ImageBitmap, tick = -1n, upstream: Upstream = NO_COST): void {
    this.drop();
    this.latest = view;
    this.latestTick = tick;
    this.latestCost = upstream;
    if (!this.raf) this.raf = requestAnimationFrame(this.paint);
  }

  stop(): void {
    cancelAnimationFrame(this.raf);
    this.raf = 0;
    this.drop();
  }

  /** Forgets the queued view (an ImageBitmap's memory is released). */
  private drop(): void {
    if (this.latest && !(this.latest instanceof Uint8Array)) this.latest.close();
    this.latest = null;
  }

  private readonly paint = (): void => {
    this.raf = 0;
    const view = this.latest;
    const tick = this.latestTick;
    const upstream = this.latestCost;
    this.latest = null;
    if (!view) return;
    const t0 = performance.now();
    let problem: string;
    if (view instanceof Uint8Array) {
      problem = this.draw(view);
      if (!problem) {
        this.lastView = view;
        this.lastTick = tick;
      }
    } else {
      problem = this.drawBitmap(view);
      view.close();
    }
    if (!problem) this.onDrawn(tick, performance.now() - t0, upstream);
    this.onPaint(problem);
  };

  /** Draws one indexed8 view; returns why it could not, or "" on success. */
  draw(view: Uint8Array): string {
    const size = indexed8Size(view);
    if (typeof size === "string") return size;
    const { w, h } = size;
    if (!this.image || this.image.width !== w || this.image.height !== h) {
      this.canvas.width = w;
      this.canvas.height = h;
      this.image = this.ctx.createImageData(w, h);
      this.pixels = new Uint32Array(this.image.data.buffer);
    }
    this.palette.expand(view, w * h, this.pixels);
    this.ctx.putImageData(this.image, 0, 0);
    return "";
  }

  /** Draws a frame the render worker made. */
  private drawBitmap(bitmap: ImageBitmap): string {
    if (this.canvas.width !== bitmap.width || this.canvas.height !== bitmap.height) {
      this.canvas.width = bitmap.width;
      this.canvas.height = bitmap.height;
      this.image = null; // the next indexed8 view sizes the canvas again
    }
    this.ctx.drawImage(bitmap, 0, 0);
    return "";
  }
}
