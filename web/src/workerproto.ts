// Messages between the page (snapshots.ts) and the render worker (renderworker.ts).

export interface InitRequest {
  type: "init";
  /** Where the module's bytes are: GET /modules/{build_id}.wasm on the gateway. */
  url: string;
  /** The build id: the module's bytes must hash (SHA-256, lowercase hex) to it. */
  buildId: string;
  /** Session ticket, sent as "Authorization: Bearer <ticket>" ("" sends none). */
  ticket: string;
  /**
   * A canvas transferred from the page (transferControlToOffscreen) to draw into.
   * Without one the worker answers each render with an ImageBitmap.
   */
  canvas?: OffscreenCanvas;
}

export interface RenderRequest {
  type: "render";
  seq: number;
  tick: bigint;
  /** The snapshot's bytes (transferred). */
  snapshot: ArrayBuffer;
  /** Also answer with the SHA-256 of the indexed8 frame (tests). */
  wantHash?: boolean;
}

/** Asks for the SHA-256 of the last indexed8 frame rendered. */
export interface HashRequest {
  type: "hash";
  seq: number;
}

/**
 * A frame of a pixel stream, as the stream carried it (Frame.view and how it is
 * encoded). The worker decodes every one in order (deltas apply to the one
 * before) and draws the newest: a frame followed by another already waiting is
 * decoded but not drawn. Needs no module ("init").
 */
export interface DecodeRequest {
  type: "decode";
  seq: number;
  tick: bigint;
  /** ludus.v1.FrameEncoding, as a number. */
  encoding: number;
  keyframe: boolean;
  baseTick: bigint;
  /** The encoded view (transferred). */
  payload: ArrayBuffer;
}

/** A new pixel stream: its first frame is a keyframe, so the last one is forgotten. */
export interface ResetRequest {
  type: "reset";
}

export type ToWorker = InitRequest | RenderRequest | HashRequest | DecodeRequest | ResetRequest;

export interface Ready {
  type: "ready";
  /** Bytes of the module, and the milliseconds spent on each step of loading it. */
  bytes: number;
  fetchMs: number;
  compileMs: number;
  initMs: number;
}

export interface Rendered {
  type: "frame";
  seq: number;
  tick: bigint;
  width: number;
  height: number;
  /** Milliseconds from the snapshot's arrival to the frame on a canvas. */
  ms: number;
  /** Of which in the module (ludus_buffer, copying the snapshot, ludus_render). */
  wasmMs: number;
  /** Pixel streams: decoding the frame (not part of ms); 0 for snapshots. */
  decodeMs?: number;
  bitmap?: ImageBitmap;
  /** Pixel streams: why the view could not be drawn (no bitmap then). */
  problem?: string;
  sha256?: string;
}

export interface HashReply {
  type: "hash";
  seq: number;
  /** -1 before the first frame. */
  tick: bigint;
  sha256: string;
  size: number;
}

export type FailStage = "fetch" | "verify" | "compile" | "initialize" | "render";

export interface Failed {
  type: "error";
  stage: FailStage;
  message: string;
  /** The render request that failed, if any. */
  seq?: number;
}

/**
 * A pixel stream's frame did not decode (a malformed payload, a delta without its
 * base): the stream must start again with a keyframe. The worker goes on.
 */
export interface DecodeFailed {
  type: "decode-error";
  seq: number;
  message: string;
}

export type FromWorker = Ready | Rendered | HashReply | Failed | DecodeFailed;
