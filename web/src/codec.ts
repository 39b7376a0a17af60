// The frame codec's decoder (docs/STREAMS.md; the Go side is gateway/framecodec):
// a keyframe, then XOR deltas against the previous frame, run-length coded and
// compressed with raw deflate, which browsers inflate natively with
// DecompressionStream("deflate-raw"). The render worker decodes pixel streams with
// it too (renderworker.ts), so it imports no protobuf code: only Frame's type.

import type { Frame } from "./gen/ludus/v1/game_pb";

export const HEADER_SIZE = 8;
export const VERSION = 1;
/** The largest frame accepted unless told otherwise (as the Go decoder). */
export const DEFAULT_MAX_RAW_SIZE = 16 << 20;

export const STORED = 0;
export const DEFLATE = 1;
export const ZSTD = 2;

/** FrameEncoding values (ludus.v1.FrameEncoding; as numbers, see the file comment). */
export const ENCODING_UNSPECIFIED = 0;
export const ENCODING_RAW = 1;
export const ENCODING_DELTA_DEFLATE = 2;

/** The fields of a stream's Frame that decoding needs. */
export type EncodedFrame = Pick<Frame, "view" | "encoding" | "keyframe" | "tick" | "baseTick">;

export type CodecErrorKind = "malformed" | "too_large" | "no_base";

/** A payload that cannot be decoded; kind matches the Go decoder's errors. */
export class CodecError extends Error {
  constructor(
    readonly kind: CodecErrorKind,
    message: string,
  ) {
    super(`frame codec: ${message}`);
    this.name = "CodecError";
  }
}

export interface Header {
  keyframe: boolean;
  compression: number;
  /** Size of the decoded frame in bytes. */
  rawSize: number;
}

export function parseHeader(p: Uint8Array): Header {
  if (p.length < HEADER_SIZE) {
    throw new CodecError("malformed", `${p.length} bytes, shorter than the ${HEADER_SIZE}-byte header`);
  }
  if (p[0] !== 0x4c || p[1] !== 0x46) throw new CodecError("malformed", 'bad magic (want "LF")');
  if (p[2] !== VERSION) throw new CodecError("malformed", `version ${p[2]} (this decoder reads version ${VERSION})`);
  const flags = p[3]!;
  if (flags & ~0x0f) throw new CodecError("malformed", `unknown flags 0x${flags.toString(16)}`);
  const compression = (flags >> 1) & 7;
  if (compression > ZSTD) throw new CodecError("malformed", `unknown compression ${compression}`);
  const rawSize = (p[4]! | (p[5]! << 8) | (p[6]! << 16) | (p[7]! << 24)) >>> 0;
  return { keyframe: (flags & 1) !== 0, compression, rawSize };
}

/** A valid body for n bytes is never longer than this (as the Go decoder). */
function maxBody(n: number): number {
  return 2 * n + 16;
}

let deflateRaw: boolean | undefined;

/** Whether this browser can decode FRAME_ENCODING_DELTA_DEFLATE. */
export function deltaDeflateSupported(): boolean {
  if (deflateRaw === undefined) {
    try {
      new DecompressionStream("deflate-raw");
      deflateRaw = true;
    } catch {
      deflateRaw = false;
    }
  }
  return deflateRaw;
}

/** Inflates raw deflate, refusing output longer than limit. */
async function inflateRaw(body: Uint8Array, limit: number): Promise<Uint8Array> {
  const ds = new DecompressionStream("deflate-raw");
  const writer = ds.writable.getWriter();
  // Errors surface on the readable side; the writer's own promises are ignored.
  writer.write(body as Uint8Array<ArrayBuffer>).catch(() => {});
  writer.close().catch(() => {});
  const reader = ds.readable.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    let r: ReadableStreamReadResult<Uint8Array>;
    try {
      r = await reader.read();
    } catch (err) {
      throw new CodecError("malformed", `deflate: ${err instanceof Error ? err.message : String(err)}`);
    }
    if (r.done) break;
    total += r.value.length;
    if (total > limit) {
      reader.cancel().catch(() => {});
      throw new CodecError("too_large", `deflate body exceeds ${limit} bytes`);
    }
    chunks.push(r.value);
  }
  if (chunks.length === 1) return chunks[0]!;
  const out = new Uint8Array(total);
  let off = 0;
  for (const c of chunks) {
    out.set(c, off);
    off += c.length;
  }
  return out;
}

/** XORs the run-length coded body into out, which it must fill exactly. */
export function applyRLE(out: Uint8Array, body: Uint8Array): void {
  const n = out.length;
  let pos = 0;
  let r = 0;
  const uvarint = (what: string): number => {
    let v = 0;
    let scale = 1;
    for (let i = 0; ; i++) {
      if (r >= body.length) throw new CodecError("malformed", `body ends inside a ${what} at body byte ${r}`);
      if (i >= 10) throw new CodecError("malformed", `${what} overflows at body byte ${r}`);
      const b = body[r++]!;
      v += (b & 0x7f) * scale;
      scale *= 128;
      if (b < 0x80) break;
    }
    if (v > n - pos) {
      throw new CodecError("malformed", `${what} of ${v} at output byte ${pos} runs past the ${n}-byte frame`);
    }
    return v;
  };
  while (pos < n) {
    pos += uvarint("zero run");
    if (pos === n) break;
    const l = uvarint("literal length");
    if (body.length - r < l) {
      throw new CodecError("malformed", `literal of ${l} bytes at body byte ${r}, only ${body.length - r} left`);
    }
    for (let i = 0; i < l; i++) out[pos + i]! ^= body[r + i]!;
    pos += l;
    r += l;
  }
  if (r !== body.length) {
    throw new CodecError("malformed", `${body.length - r} trailing body bytes after the ${n}-byte frame`);
  }
}

/**
 * FrameDecoder decodes one stream's payloads, keeping the last frame as the base
 * of the next delta. Decoding is asynchronous (DecompressionStream): await each
 * payload before the next. Every decoded frame is a new array, safe to keep.
 */
export class FrameDecoder {
  maxRawSize = DEFAULT_MAX_RAW_SIZE;
  private base: Uint8Array | null = null;
  private baseTick: bigint | null = null;

  /** Forgets the base: the next payload must be a keyframe (a new stream). */
  reset(): void {
    this.base = null;
    this.baseTick = null;
  }

  /** Decodes one payload. On error the base is unchanged. */
  async decode(payload: Uint8Array): Promise<Uint8Array> {
    const h = parseHeader(payload);
    if (h.rawSize > this.maxRawSize) {
      throw new CodecError("too_large", `declares ${h.rawSize} bytes; the limit is ${this.maxRawSize}`);
    }
    const base = this.base;
    if (!h.keyframe && (!base || base.length !== h.rawSize)) {
      throw new CodecError(
        "no_base",
        base ? `delta of ${h.rawSize} bytes, base is ${base.length} bytes` : "the first frame of a stream must be a keyframe",
      );
    }
    const src = payload.subarray(HEADER_SIZE);
    const limit = maxBody(h.rawSize);
    let body: Uint8Array;
    switch (h.compression) {
      case STORED:
        if (src.length > limit) throw new CodecError("too_large", `body of ${src.length} bytes exceeds ${limit}`);
        body = src;
        break;
      case DEFLATE:
        body = await inflateRaw(src, limit);
        break;
      default:
        throw new CodecError("malformed", "zstd payloads are for native clients; this decoder reads deflate");
    }
    const out = h.keyframe ? new Uint8Array(h.rawSize) : base!.slice();
    applyRLE(out, body);
    this.base = out;
    return out;
  }

  /**
   * Decodes the view of a stream's Frame message whatever its encoding: raw views
   * pass through; a delta must apply to the last frame decoded.
   */
  async frame(f: EncodedFrame): Promise<Uint8Array> {
    switch (f.encoding as number) {
      case ENCODING_UNSPECIFIED:
      case ENCODING_RAW:
        this.base = null;
        return f.view;
      case ENCODING_DELTA_DEFLATE: {
        if (!f.keyframe && this.baseTick !== f.baseTick) {
          throw new CodecError("no_base", `delta on tick ${f.baseTick}, but the last frame decoded is tick ${this.baseTick ?? "none"}`);
        }
        const view = await this.decode(f.view);
        this.baseTick = f.tick;
        return view;
      }
      default:
        throw new CodecError("malformed", `frame encoding ${f.encoding} is not supported by this client`);
    }
  }
}
