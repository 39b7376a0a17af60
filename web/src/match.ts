// One open match on the page: the frame stream (played or spectated), drawing, the
// status bar and, when playing, the keyboard.

import { Code, ConnectError } from "@connectrpc/connect";
import { describeError, type Session } from "./api";
import { deltaDeflateSupported, FrameDecoder } from "./codec";
import { FrameEncoding, type Frame, type Status } from "./gen/ludus/v1/game_pb";
import { InputSender, Keyboard } from "./input";
import { INDEXED8, Renderer } from "./render";
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

  constructor(private readonly o: MatchOptions) {
    this.status = o.status;
    this.renderer = new Renderer(o.canvas);
    this.renderer.onPaint = (problem) => this.showOverlay(problem);
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
    });
    this.status.say("");
    this.fpsTimer = window.setInterval(() => {
      this.status.set({ fps: this.frames });
      this.frames = 0;
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
      try {
        this.status.set({ conn: "connecting" });
        // Every stream starts with a keyframe; deltas apply to this stream's frames.
        const decoder = new FrameDecoder();
        const accept = acceptEncodings();
        const stream = spectate
          ? session.game.spectate({ gameId, acceptEncodings: accept }, { signal })
          : session.game.streamFrames({ gameId, acceptEncodings: accept }, { signal });
        for await (const res of stream) {
          if (res.msg.case === "frame") {
            // Decoded in order before the next message is read; a frame that does
            // not decode ends the stream, and the retry starts with a keyframe.
            this.onFrame(res.msg.value, await decoder.frame(res.msg.value));
            backoff = BACKOFF_MIN_MS;
            relogged = false;
          } else if (res.msg.case === "status") {
            this.onStatus(res.msg.value);
          }
        }
      } catch (err) {
        if (signal.aborted) return;
        why = describeError(err);
        if (ConnectError.from(err).code === Code.Unauthenticated && !relogged) {
          // Expired or unknown ticket (e.g. the page slept): sign in and retry at once.
          relogged = true;
          now = await session.login().then(() => true, () => false);
        }
      }
      if (signal.aborted || this.finished) break;
      this.reconnecting = true;
      if (now) continue;
      const delay = backoff * (0.75 + Math.random() / 2);
      backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
      this.status.set({ conn: "retrying" });
      this.status.say(`${why}; retrying in ${(delay / 1000).toFixed(1)} s`, "error");
      await sleep(delay, signal);
    }
    if (this.finished) this.status.set({ conn: "closed" });
  }

  private onFrame(frame: Frame, view: Uint8Array): void {
    this.frames++;
    this.status.set({ conn: "streaming", tick: frame.tick });
    if (this.reconnecting) {
      this.reconnecting = false;
      this.status.say("");
    }
    if (this.viewFormat && this.viewFormat !== INDEXED8) return;
    this.renderer.submit(view);
  }

  private onStatus(s: Status): void {
    if (s.viewFormat) this.setFormat(s.viewFormat);
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
    this.showOverlay(
      format && format !== INDEXED8 ? `This game's view format "${format}" is not supported by the web client.` : "",
    );
  }
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
