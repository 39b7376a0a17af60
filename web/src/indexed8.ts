// The indexed8 view format (docs/ABI.md): "IDX8", u16 width, u16 height (little
// endian), a 256-entry RGB palette, then one palette index per pixel. Shared by
// the page's renderer (pixels from the node) and the render worker (pixels from
// the module's ludus_render).

/** The view format this client can draw; see docs/ABI.md. */
export const INDEXED8 = "indexed8";

export const HEADER = 8; // "IDX8", u16 width, u16 height
export const PALETTE = 768; // 256 × (R, G, B)

/** The size of an indexed8 view, or why it is not one. */
export function indexed8Size(view: Uint8Array): { w: number; h: number } | string {
  if (view.length < HEADER + PALETTE || view[0] !== 0x49 || view[1] !== 0x44 || view[2] !== 0x58 || view[3] !== 0x38) {
    return "frame is not an indexed8 view (no IDX8 header)";
  }
  const w = view[4]! | (view[5]! << 8);
  const h = view[6]! | (view[7]! << 8);
  const n = w * h;
  if (n === 0 || view.length < HEADER + PALETTE + n) {
    return `indexed8 view of ${w}×${h} is truncated (${view.length} bytes)`;
  }
  return { w, h };
}

/**
 * Palette lookup table: lut[i] is palette entry i as canvas RGBA bytes. Writing
 * through the byte view keeps it right on any endianness.
 */
export class PaletteLUT {
  readonly lut = new Uint32Array(256);
  private readonly bytes = new Uint8Array(this.lut.buffer);

  /**
   * Expands the n = width × height pixels of a checked indexed8 view into out
   * (a Uint32Array over ImageData's bytes), one lookup per pixel.
   */
  expand(view: Uint8Array, n: number, out: Uint32Array): void {
    const lb = this.bytes;
    for (let i = 0, p = HEADER; i < 1024; i += 4, p += 3) {
      lb[i] = view[p]!;
      lb[i + 1] = view[p + 1]!;
      lb[i + 2] = view[p + 2]!;
      lb[i + 3] = 255;
    }
    const lut = this.lut;
    for (let i = 0, p = HEADER + PALETTE; i < n; i++, p++) out[i] = lut[view[p]!]!;
  }
}
