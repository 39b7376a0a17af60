// Drawing views on the canvas: the indexed8 format, newest frame only, once per
// animation frame.

/** The view format this client can draw; see docs/ABI.md. */
export const INDEXED8 = "indexed8";

const HEADER = 8; // "IDX8", u16 width, u16 height
const PALETTE = 768; // 256 × (R, G, B)

/**
 * Renderer keeps the newest submitted view and draws it on the next animation frame;
 * older views that were never drawn are dropped.
 */
export class Renderer {
  private readonly ctx: CanvasRenderingContext2D;
  private image: ImageData | null = null;
  private pixels = new Uint32Array(0);
  /** Palette as canvas pixels: lut[i] is palette entry i as RGBA bytes. */
  private readonly lut = new Uint32Array(256);
  private readonly lutBytes = new Uint8Array(this.lut.buffer);
  private latest: Uint8Array | null = null;
  private raf = 0;
  /** Called after each paint with why the view could not be drawn, or "" if it was. */
  onPaint: (problem: string) => void = () => {};

  constructor(readonly canvas: HTMLCanvasElement) {
    const ctx = canvas.getContext("2d", { alpha: false });
    if (!ctx) throw new Error("canvas 2D context is not available");
    this.ctx = ctx;
    ctx.fillStyle = "#000";
    ctx.fillRect(0, 0, canvas.width, canvas.height);
  }

  /** Queues a view; only the newest one queued before the next paint is drawn. */
  submit(view: Uint8Array): void {
    this.latest = view;
    if (!this.raf) this.raf = requestAnimationFrame(this.paint);
  }

  stop(): void {
    cancelAnimationFrame(this.raf);
    this.raf = 0;
    this.latest = null;
  }

  private readonly paint = (): void => {
    this.raf = 0;
    const view = this.latest;
    this.latest = null;
    if (!view) return;
    this.onPaint(this.draw(view));
  };

  /** Draws one indexed8 view; returns why it could not, or "" on success. */
  draw(view: Uint8Array): string {
    if (view.length < HEADER + PALETTE || view[0] !== 0x49 || view[1] !== 0x44 || view[2] !== 0x58 || view[3] !== 0x38) {
      return "frame is not an indexed8 view (no IDX8 header)";
    }
    const w = view[4]! | (view[5]! << 8);
    const h = view[6]! | (view[7]! << 8);
    const n = w * h;
    if (n === 0 || view.length < HEADER + PALETTE + n) {
      return `indexed8 view of ${w}×${h} is truncated (${view.length} bytes)`;
    }
    if (!this.image || this.image.width !== w || this.image.height !== h) {
      this.canvas.width = w;
      this.canvas.height = h;
      this.image = this.ctx.createImageData(w, h);
      this.pixels = new Uint32Array(this.image.data.buffer);
    }
    // Palette to RGBA bytes, written byte-wise so it is right on any endianness.
    const lb = this.lutBytes;
    for (let i = 0, p = HEADER; i < 1024; i += 4, p += 3) {
      lb[i] = view[p]!;
      lb[i + 1] = view[p + 1]!;
      lb[i + 2] = view[p + 2]!;
      lb[i + 3] = 255;
    }
    const lut = this.lut;
    const out = this.pixels;
    for (let i = 0, p = HEADER + PALETTE; i < n; i++, p++) out[i] = lut[view[p]!]!;
    this.ctx.putImageData(this.image, 0, 0);
    return "";
  }
}
