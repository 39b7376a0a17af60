// One open match on the page: the frame stream (played or spectated), drawing, the
// status bar and, when playing, the keyboard.
//
// Delivery: a game whose module has a renderer (GameInfo.snapshot_format) is
// streamed as snapshots that the page renders with the module's own ludus_render in
// a worker (snapshots.ts), when the browser can (WebAssembly, Worker, OffscreenCanvas,
// a secure context); otherwise as pixels the node rendered, drawn as before.
// ?delivery=pixels or ?delivery=snapshots forces a mode. When the module cannot be
// fetched or verified, or its render traps or runs away, the stream is opened again
// with pixels and the status bar says why.

import { Code, ConnectError } from "@connectrpc/connect";
import { describeError, type Session } from "./api";
import { deltaDeflateSupported, FrameDecoder } from "./codec";
import { Delivery, FrameEncoding, type Frame, type Status } from "./gen/ludus/v1/game_pb";
import { sha256Hex } from "./hash";
import { hooks, RenderTimes, type FrameHash, type Mode } from "./hooks";
import { InputSender, Keyboard } from "./input";
import { INDEXED8, Renderer } from "./render";
import { SnapshotRenderer, snapshotSupport } from "./snapshots";
import { StatusBar } from "./status";

export interface MatchOptions {
  session: Session;
  gameId: string;
  /** Spectators stream the spectator camera and send no input. */
  spectate: boolean;
  canvas: HTMLCanvasElement;
  /** Shown over the canvas when the view cannot be drawn. */
  overlay: HTMLElement;
  status: StatusBar;
  /** View format, if already known (JoinGame); otherwise taken from the stream. */
  viewFormat?: string;
  slot?: number;
  /**
   * GameInfo.snapshot_format: "" when the module has no renderer (pixels only),
   * undefined when not known (snapshots are tried where the browser can).
   */
  snapshotFormat?: string;
  /** GameInfo.build_id, used when the stream's Status names none. */
  buildId?: string;
}

/**
 * Frame encodings to ask for: keyframes and deflated deltas where the browser
 * inflates raw deflate (DecompressionStream), whole views otherwise or with
 * ?codec=raw.
 */
function acceptEncodings(): FrameEncoding[] {
  const raw = new URLSearchParams(location.search).get("codec") === "raw";
  return !raw && deltaDeflateSupported() ? [FrameEncoding.DELTA_DEFLATE] : [];
}

/** ?delivery=pixels|snapshots, or null. */
function forcedDelivery(): Mode | null {
  const d = new URLSearchParams(location.search).get("delivery");
  return d === "pixels" || d === "snapshots" ? d : null;
}

/** The delivery to ask for first, and why not snapshots when not. */
function chooseDelivery(snapshotFormat: string | undefined): { mode: Mode; why: string } {
  const forced = forcedDelivery();
  if (forced === "pixels") return { mode: "pixels", why: "?delivery=pixels" };
  if (forced !== "snapshots" && snapshotFormat === "") return { mode: "pixels", why: "" }; // no renderer: nothing to say
  const lack = snapshotSupport();
  if (lack) return { mode: "pixels", why: lack };
  return { mode: "snapshots", why: "" };
}

const BACKOFF_MIN_MS = 500;
const BACKOFF_MAX_MS = 10_000;

export class Match {
  private readonly abort = new AbortController();
  private readonly renderer: Renderer;
  private readonly status: StatusBar;
  private keyboard: Keyboard | null = null;
  private sender: InputSender | null = null;
  private viewFormat = "";
  private reconnecting = false;
  private inputFailed = false;
  private finished = false;
  private frames = 0;
  private readonly fpsTimer: number;

  /** The delivery the next stream asks for, and why pixels if pixels. */
  private want: Mode;
  private why: string;
  /** What the current stream delivers; null until its first Status says. */
  private streamMode: Mode | null = null;
  /** Aborts the current stream only (a switch to pixels re-opens it at once). */
  private streamAbort: AbortController | null = null;
  private switching = false;
  private snap: SnapshotRenderer | null = null;
  /** A snapshot that arrived before the stream's first Status. */
  private early: { tick: bigint; view: Uint8Array } | null = null;
  private readonly times = new RenderTimes();
  private readonly moduleTimes = new RenderTimes();

  constructor(private readonly o: MatchOptions) {
    this.status = o.status;
    this.renderer = new Renderer(o.canvas);
    this.renderer.onPaint = (problem) => this.showOverlay(problem);
    this.renderer.onDrawn = (_tick, ms) => {
      hooks.framesDrawn++;
      if (this.streamMode !== "snapshots") this.times.add(ms);
    };
    ({ mode: this.want, why: this.why } = chooseDelivery(o.snapshotFormat));
    hooks.framesDrawn = 0;
    hooks.lastFrame = () => this.lastFrame();
    this.setFormat(o.viewFormat ?? "");
    this.status.set({
      game: o.gameId,
      slot: o.spectate ? "spectator" : (o.slot ?? ""),
      conn: "connecting",
      fps: 0,
      ack: "",
      node: "",
      region: "",
      tick: "",
      state: "",
      render: "",
    });
    this.status.say("");
    this.showMode();
    this.fpsTimer = window.setInterval(() => {
      this.status.set({ fps: this.frames });
      this.frames = 0;
      this.publishTimes();
    }, 1000);
    if (!o.spectate) {
      const sender = new InputSender((seq, payload, signal) =>
        o.session.game.sendInput({ gameId: o.gameId, seq, payload }, { signal }),
      );
      sender.onAck = (a) => {
        this.status.set({ ack: `${Math.round(a.latencyMs)} ms (tick ${a.tick})` });
        if (this.inputFailed) {
          this.inputFailed = false;
          this.status.say("");
        }
      };
      sender.onError = (err) => {
        this.inputFailed = true;
        this.status.say(`Input not delivered: ${describeError(err)}`, "error");
      };
      this.sender = sender;
      this.keyboard = new Keyboard((mask) => sender.set(mask));
    }
    void this.run();
  }

  close(): void {
    this.abort.abort();
    clearInterval(this.fpsTimer);
    this.stopInput();
    this.renderer.stop();
    this.snap?.close();
    this.snap = null;
    hooks.mode = "";
    hooks.lastFrame = () => Promise.resolve(null);
  }

  private stopInput(): void {
    this.keyboard?.dispose();
    this.sender?.stop();
    this.keyboard = null;
    this.sender = null;
  }

  /** Streams until the match ends or the view is closed, reconnecting with backoff. */
  private async run(): Promise<void> {
    const { session, gameId, spectate } = this.o;
    const signal = this.abort.signal;
    let backoff = BACKOFF_MIN_MS;
    let relogged = false; // signed in again since the last frame
    while (!signal.aborted && !this.finished) {
      let why = "stream closed";
      let now = false;
      this.switching = false; // a fallback between streams applies to this one already
      const mode = this.want;
      const streamAbort = new AbortController();
      const stop = (): void => streamAbort.abort();
      signal.addEventListener("abort", stop, { once: true });
      this.streamAbort = streamAbort;
      this.streamMode = null;
      this.early = null;
      try {
        this.status.set({ conn: "connecting" });
        // Every stream starts with a keyframe; deltas apply to this stream's frames.
        const decoder = new FrameDecoder();
        const req = {
          gameId,
          acceptEncodings: acceptEncodings(),
          delivery: mode === "snapshots" ? Delivery.SNAPSHOTS : Delivery.PIXELS,
        };
        const opts = { signal: streamAbort.signal };
        const stream = spectate ? session.game.spectate(req, opts) : session.game.streamFrames(req, opts);
        for await (const res of stream) {
          if (this.switching) break; // fallback() ended this stream
          if (res.msg.case === "frame") {
            // Decoded in order before the next message is read; a frame that does
            // not decode ends the stream, and the retry starts with a keyframe.
            const view = await decoder.frame(res.msg.value);
            if (this.switching) break;
            this.onFrame(res.msg.value, view, mode);
            backoff = BACKOFF_MIN_MS;
            relogged = false;
          } else if (res.msg.case === "status") {
            this.onStatus(res.msg.value, mode);
          }
        }
      } catch (err) {
        if (signal.aborted) return;
        why = describeError(err);
        const code = ConnectError.from(err).code;
        if (this.switching) {
          // fallback() ended the stream: re-open it with pixels below.
        } else if (mode === "snapshots" && code === Code.FailedPrecondition && why.includes("DELIVERY_PIXELS")) {
          // The module has no renderer: the refusal names DELIVERY_PIXELS
          // (other FailedPreconditions, such as "join first", are not about
          // the mode).
          this.fallback(`the server refused snapshots (${why})`);
        } else if (code === Code.Unauthenticated && !relogged) {
          // Expired or unknown ticket (e.g. the page slept): sign in and retry at once.
          relogged = true;
          now = await session.login().then(() => true, () => false);
        }
      } finally {
        signal.removeEventListener("abort", stop);
        this.streamAbort = null;
      }
      if (signal.aborted || this.finished) break;
      this.reconnecting = true;
      if (this.switching) {
        this.switching = false;
        continue;
      }
      if (now) continue;
      const delay = backoff * (0.75 + Math.random() / 2);
      backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
      this.status.set({ conn: "retrying" });
      this.status.say(`${why}; retrying in ${(delay / 1000).toFixed(1)} s`, "error");
      await sleep(delay, signal);
    }
    if (this.finished) this.status.set({ conn: "closed" });
  }

  private onFrame(frame: Frame, view: Uint8Array, asked: Mode): void {
    this.frames++;
    this.status.set({ conn: "streaming", tick: frame.tick });
    if (this.reconnecting) {
      this.reconnecting = false;
      this.status.say("");
    }
    if (asked === "snapshots" && this.streamMode === null) {
      this.early = { tick: frame.tick, view }; // wait for the Status that says what it is
      return;
    }
    if (this.streamMode === "snapshots") {
      this.snap?.submit(frame.tick, view);
      return;
    }
    if (this.viewFormat && this.viewFormat !== INDEXED8) return;
    this.renderer.submit(view, frame.tick);
  }

  private onStatus(s: Status, asked: Mode): void {
    if (s.viewFormat) this.setFormat(s.viewFormat);
    if (this.streamMode === null) this.startDelivery(s, asked);
    else if (this.streamMode === "snapshots" && s.buildId && this.snap && s.buildId !== this.snap.module) this.snap.load(s.buildId);
    this.status.set({ node: s.nodeId, region: s.region, tick: s.tick, state: s.state });
    if (!this.o.spectate && s.slot >= 0) this.status.set({ slot: s.slot });
    switch (s.state) {
      case "ended":
        this.finish(s.message ? `Match ended: ${s.message}` : "Match ended", "ok");
        break;
      case "failed":
        this.finish(`Match failed: ${s.message || "unknown error"}`, "error");
        break;
      default:
        this.status.say(s.message);
    }
  }

  /** The stream's first Status says what its frames carry. */
  private startDelivery(s: Status, asked: Mode): void {
    if (asked === "snapshots" && s.delivery === "snapshots") {
      this.streamMode = "snapshots";
      if (!this.snap) {
        const snap = new SnapshotRenderer({
          ticket: () => this.o.session.ticket,
          onFrame: (bitmap, tick, ms, moduleMs) => {
            this.times.add(ms);
            this.moduleTimes.add(moduleMs);
            this.renderer.submit(bitmap, tick);
          },
          onFail: (reason) => {
            if (this.snap === snap) this.fallback(reason);
          },
          onReady: () => this.showMode(),
        });
        this.snap = snap;
      }
      this.snap.load(s.buildId || this.o.buildId || "");
    } else {
      this.streamMode = "pixels";
      if (asked === "snapshots") {
        // A gateway that does not know snapshots sends pixels (and no delivery).
        this.want = "pixels";
        this.why = "the server sends pixels";
      }
    }
    this.times.reset();
    this.moduleTimes.reset();
    this.showMode();
    const early = this.early;
    this.early = null;
    if (early && this.snap && this.streamMode === "snapshots") this.snap.submit(early.tick, early.view);
    else if (early && this.streamMode === "pixels") this.renderer.submit(early.view, early.tick);
  }

  /** Snapshots failed: render on the node from now on, and say why. */
  private fallback(reason: string): void {
    this.snap?.close();
    this.snap = null;
    if (this.want === "pixels" && this.switching) return;
    this.want = "pixels";
    this.why = reason;
    this.streamMode = null;
    this.times.reset();
    this.moduleTimes.reset();
    this.showMode();
    this.status.say(`Rendering on the server instead: ${reason}`, "error");
    this.switching = true;
    this.streamAbort?.abort();
  }

  private showMode(): void {
    const mode = this.streamMode ?? this.want;
    let text: string;
    if (mode === "snapshots") {
      text = this.snap && !this.snap.loaded ? "snapshots (loading the game's renderer…)" : "snapshots (rendered here)";
    } else {
      text = this.why ? `pixels (rendered on the server: ${this.why})` : "pixels (rendered on the server)";
    }
    this.status.set({ mode: text });
    hooks.mode = mode;
    hooks.why = mode === "pixels" ? this.why : "";
    this.o.canvas.dataset["mode"] = mode;
    this.showOverlay(this.viewFormat && this.viewFormat !== INDEXED8 && mode === "pixels" ? unsupported(this.viewFormat) : "");
  }

  private publishTimes(): void {
    const med = this.times.median();
    hooks.renderMsMedian = med;
    hooks.renderSamples = this.times.count;
    hooks.moduleMsMedian = this.moduleTimes.median();
    this.status.set({ render: med === null ? "" : `${med.toFixed(2)} ms` });
    this.o.canvas.dataset["frames"] = String(hooks.framesDrawn);
    this.o.canvas.dataset["renderMs"] = med === null ? "" : med.toFixed(3);
  }

  /** The hash of the indexed8 frame last drawn (test hook). */
  private async lastFrame(): Promise<FrameHash | null> {
    if (this.streamMode === "snapshots") {
      const h = await this.snap?.hash();
      return h && h.size > 0 ? { mode: "snapshots", tick: String(h.tick), sha256: h.sha256, size: h.size } : null;
    }
    const view = this.renderer.lastView;
    if (!view) return null;
    return { mode: "pixels", tick: String(this.renderer.lastTick), sha256: await sha256Hex(view), size: view.length };
  }

  private finish(message: string, kind: "ok" | "error"): void {
    this.finished = true;
    this.stopInput();
    this.status.say(message, kind);
  }

  private showOverlay(text: string): void {
    const el = this.o.overlay;
    if (el.textContent === text) return;
    el.textContent = text;
    el.hidden = text === "";
  }

  /** Records the view format ("" while unknown: frames are tried as indexed8). */
  private setFormat(format: string): void {
    this.viewFormat = format;
    const mode = this.streamMode ?? this.want;
    this.showOverlay(format && format !== INDEXED8 && mode === "pixels" ? unsupported(format) : "");
  }
}

function unsupported(format: string): string {
  return `This game's view format "${format}" is not supported by the web client.`;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
    function done(): void {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    }
  });
}
