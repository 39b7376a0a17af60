// One open match on the page: the frame stream (played or spectated), drawing, the
// status bar and, when playing, the keyboard and the mouse.
//
// Delivery: a game whose module has a renderer (GameInfo.snapshot_format) is
// streamed as snapshots that the page renders with the module's own ludus_render in
// a worker (snapshots.ts), when the browser can (WebAssembly, Worker, OffscreenCanvas,
// a secure context); otherwise as pixels the node rendered, which the same worker
// decodes off the main thread where it can (PixelWorker), or the page itself.
// ?delivery=pixels or ?delivery=snapshots forces a mode. When the module cannot be
// fetched or verified, or its render traps or runs away, the stream is opened again
// with pixels and the status bar says why.

import { describeResult } from "./result";
import { Code, ConnectError } from "@connectrpc/connect";
import { describeError, rememberRegion, trouble, type Session } from "./api";
import { deltaDeflateSupported, FrameDecoder } from "./codec";
import { Delivery, FrameEncoding, type Frame, type Status } from "./gen/ludus/v1/game_pb";
import { sha256Hex } from "./hash";
import { FrameTimes, hooks, RenderTimes, type FrameCosts, type FrameHash, type Mode } from "./hooks";
import { HeldControls, InputSender, type MouseState } from "./input";
import { FALLBACK_META, parseMeta, type ModuleMeta } from "./meta";
import { INDEXED8, Renderer } from "./render";
import { PixelWorker, pixelWorkerSupport, SnapshotRenderer, snapshotSupport } from "./snapshots";
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
  /** Where on-screen (touch) buttons for the module's controls go. */
  pad?: HTMLElement;
  /** The module metadata to present the match with: from the first Status, or the fallback. */
  onMeta?: (meta: ModuleMeta) => void;
  /** The game does not exist (any more): the page should stop offering links to it. */
  onGone?: () => void;
  /** Leaves the match view (the "Back to lobby" action after errors). */
  onLeave?: () => void;
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
/** Failed connections in a row (no frame between) before the page stops and offers Retry. */
const MAX_FAILURES = 6;
/** The longest wait a refusal may name for the stream to be tried again by itself. */
const MAX_AUTO_WAIT_MS = 15_000;
const PING_MS = 5_000;

export class Match {
  private readonly abort = new AbortController();
  private readonly renderer: Renderer;
  private readonly status: StatusBar;
  private controls: HeldControls | null = null;
  private sender: InputSender | null = null;
  private viewFormat = "";
  private reconnecting = false;
  private inputFailed = false;
  private finished = false;
  private frames = 0;
  private framesTotal = 0;
  private bytes = 0;
  private readonly fpsTimer: number;
  private readonly pingTimer: number;
  private metaJson: string | null = null;
  /** The module metadata the server last sent (Status.module_meta). */
  private serverMeta = "";
  private migrations = 0;
  /** Resolves the wait after MAX_FAILURES (the Retry button). */
  private retry: (() => void) | null = null;

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
  private early: { tick: bigint; view: Uint8Array; decodeMs: number } | null = null;
  private readonly times = new RenderTimes();
  private readonly moduleTimes = new RenderTimes();
  /** Per-frame costs by stage (hooks.frameCosts, the details' "frame cost"). */
  private readonly costs = new FrameTimes();
  /**
   * Pixel streams are decoded in the render worker (PixelWorker) where the browser
   * can: decodeOn says where the current stream's frames are decoded, decodeWhy why
   * on the page when not in the worker, and decodeFailure is a frame the worker
   * could not decode, which ends the stream as a failed decode here would.
   */
  private pixelWorker: PixelWorker | null = null;
  private decodeOn: "main" | "worker" = "main";
  private decodeWhy = "";
  private decodeFailure: Error | null = null;
  /** The line under the hint that explains mouse look (index.html #mouse-hint). */
  private readonly mouseHint = document.getElementById("mouse-hint");

  constructor(private readonly o: MatchOptions) {
    this.status = o.status;
    this.renderer = new Renderer(o.canvas);
    this.renderer.onPaint = (problem) => this.showOverlay(problem);
    this.renderer.onDrawn = (_tick, ms, up) => {
      hooks.framesDrawn++;
      if (this.streamMode !== "snapshots") this.times.add(up.workerMs + ms);
      this.costs.add(up, ms);
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
      cost: "",
      mouse: "",
      rtt: "",
      kbps: "",
      migrations: 0,
    });
    hooks.meta = null;
    hooks.rttMs = null;
    hooks.migrations = 0;
    hooks.lastMigrationMs = null;
    hooks.inputMask = 0;
    hooks.inputPayload = [];
    hooks.mouse = "";
    hooks.aim = 0;
    hooks.frameCosts = null;
    hooks.applyMeta = (json) => this.applyMeta(json, true);
    this.status.say("");
    this.showMode();
    this.fpsTimer = window.setInterval(() => {
      this.status.set({ fps: this.frames, kbps: Math.round((this.bytes * 8) / 1000) });
      this.frames = 0;
      this.bytes = 0;
      this.publishTimes();
    }, 1000);
    this.pingTimer = window.setInterval(() => void this.ping(), PING_MS);
    void this.ping();
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
        const t = trouble(err);
        this.status.say(`Your input did not get through: ${t.text}`, "error", [], t.raw);
      };
      this.sender = sender;
      const controls = new HeldControls((payload, mask) => {
        hooks.inputMask = mask;
        hooks.inputPayload = [...payload];
        hooks.aim = controls.aimSent.aim;
        this.showAim(controls);
        sender.set(payload);
      });
      if (o.pad) controls.attachPad(o.pad);
      controls.onMouse = (state) => this.showMouse(state, controls);
      controls.attachView(o.canvas);
      this.controls = controls;
    }
    void this.run();
  }

  close(): void {
    this.abort.abort();
    clearInterval(this.fpsTimer);
    clearInterval(this.pingTimer);
    this.retry?.();
    this.stopInput();
    this.renderer.stop();
    this.snap?.close();
    this.snap = null;
    this.pixelWorker?.close();
    this.pixelWorker = null;
    hooks.decodeOn = "";
    hooks.mode = "";
    hooks.lastFrame = () => Promise.resolve(null);
    hooks.applyMeta = () => false;
  }

  /** Measures the round trip to the gateway with Ping (not while the page is hidden). */
  private async ping(): Promise<void> {
    if (document.hidden || this.abort.signal.aborted || !this.o.session.loggedIn) return;
    const t0 = performance.now();
    try {
      await this.o.session.game.ping({ clientUnixNanos: BigInt(Date.now()) * 1_000_000n }, { signal: this.abort.signal, timeoutMs: PING_MS });
    } catch {
      return; // the stream reports trouble; an unanswered ping only leaves the old figure
    }
    const ms = performance.now() - t0;
    hooks.rttMs = ms;
    this.status.set({ rtt: `${Math.round(ms)} ms` });
  }

  /**
   * Presents the match with a module's metadata (a Status's module_meta, or the
   * fallback when it has none): the page's title and hints, and the controls.
   */
  private applyMeta(json: string, force = false): boolean {
    if (json === this.metaJson && !force) return true;
    const meta = json ? parseMeta(json) : FALLBACK_META;
    if (!meta) return false;
    this.metaJson = json;
    hooks.meta = meta;
    this.controls?.setControls(meta.controls);
    // Declared "state", or "event" (the default, also when not declared).
    if (this.sender) this.sender.events = meta.inputKind !== "state";
    this.o.onMeta?.(meta);
    return true;
  }

  private stopInput(): void {
    this.controls?.dispose();
    this.sender?.stop();
    this.controls = null;
    this.sender = null;
    this.showMouse("none", null);
  }

  /**
   * The hint line and the details for mouse look. The offer to click is for
   * screens with a mouse (a fine pointer) only: phones keep their touch buttons.
   */
  private showMouse(state: MouseState, controls: HeldControls | null): void {
    hooks.mouse = state;
    const el = this.mouseHint;
    let text = "";
    if (state === "locked") {
      text = "Mouse look on: move the mouse to turn, click to fire. Esc gives the mouse back.";
    } else if (state === "refused") {
      text = "The browser did not lock the mouse pointer, so mouse look is off (click the view to try again); the keys work as always.";
    } else if (state === "ready" && matchMedia("(any-pointer: fine)").matches) {
      text = "Click the view for mouse look: the mouse turns, its button fires; Esc gives the mouse back.";
    }
    if (el) {
      if (el.textContent !== text) el.textContent = text;
      el.hidden = text === "";
    }
    this.o.canvas.dataset["mouse"] = state;
    if (controls) this.showAim(controls);
    else this.status.set({ mouse: "" });
  }

  private showAim(controls: HeldControls): void {
    const state = controls.mouse;
    const { aim, lock } = controls.aimSent;
    this.status.set({ mouse: state === "locked" ? `locked, aim ${aim} (lock ${lock})` : state === "none" ? "" : state });
  }

  /** Streams until the match ends or the view is closed, reconnecting with backoff. */
  private async run(): Promise<void> {
    const { session, gameId, spectate } = this.o;
    const signal = this.abort.signal;
    let backoff = BACKOFF_MIN_MS;
    let relogged = false; // signed in again since the last frame
    let rejoined = false; // took the seat again since the last frame
    let failures = 0; // connections in a row that ended without a frame
    while (!signal.aborted && !this.finished) {
      let why = "stream closed";
      let said = "The connection to the game closed.";
      let raw = "";
      let waitMs = 0; // what the refusal asked to wait (Trouble.waitMs)
      const framesBefore = this.framesTotal;
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
        // Pixels are decoded in the render worker where the browser can, else here.
        const inWorker = mode === "pixels" && this.startPixelWorker();
        this.decodeOn = inWorker ? "worker" : "main";
        hooks.decodeOn = this.decodeOn;
        hooks.decodeWhy = mode === "pixels" && !inWorker ? this.decodeWhy : "";
        if (inWorker) this.pixelWorker?.reset();
        const req = {
          gameId,
          acceptEncodings: acceptEncodings(),
          delivery: mode === "snapshots" ? Delivery.SNAPSHOTS : Delivery.PIXELS,
        };
        const opts = { signal: streamAbort.signal };
        const stream = spectate ? session.game.spectate(req, opts) : session.game.streamFrames(req, opts);
        for await (const res of stream) {
          if (this.switching) break; // fallback() ended this stream
          if (res.msg.case === "frame" && inWorker) {
            // The worker decodes every frame in order and draws the newest; one it
            // cannot decode ends the stream (onDecodeError), as below.
            this.onFrame(res.msg.value, mode, null);
            backoff = BACKOFF_MIN_MS;
            relogged = false;
            rejoined = false;
          } else if (res.msg.case === "frame") {
            // Decoded in order before the next message is read; a frame that does
            // not decode ends the stream, and the retry starts with a keyframe.
            const t0 = performance.now();
            const view = await decoder.frame(res.msg.value);
            const decodeMs = performance.now() - t0;
            if (this.switching) break;
            this.onFrame(res.msg.value, mode, { view, decodeMs });
            backoff = BACKOFF_MIN_MS;
            relogged = false;
            rejoined = false;
          } else if (res.msg.case === "status") {
            this.onStatus(res.msg.value, mode);
          }
        }
      } catch (caught) {
        if (signal.aborted) return;
        // A frame the worker could not decode aborted the stream: report that.
        const err = this.decodeFailure ?? caught;
        this.decodeFailure = null;
        why = describeError(err);
        const t = trouble(err);
        said = t.text;
        raw = t.raw;
        waitMs = t.waitMs;
        const code = ConnectError.from(err).code;
        if (code === Code.Aborted && /another window/i.test(ConnectError.from(err).rawMessage)) {
          // One controller per slot: another tab or device took this player over.
          // Retrying would take it back and forth; the player chooses instead.
          this.finished = true;
          this.stopInput();
          const back = this.o.onLeave ? [{ label: "Back to lobby", run: this.o.onLeave }] : [];
          this.status.say("This player is now controlled from another window.", "error",
            [{ label: "Play here", run: () => location.reload() }, ...back], t.raw);
          break;
        }
        if (this.finished) break; // the stream's final status said how it ended
        if (t.gone) {
          // The game is over or never was: nothing to retry, nothing to share.
          this.o.onGone?.();
          this.finish(t.text, "error", t.raw);
          break;
        }
        if (this.switching) {
          // fallback() ended the stream: re-open it with pixels below.
        } else if (mode === "snapshots" && code === Code.FailedPrecondition && why.includes("DELIVERY_PIXELS")) {
          // The module has no renderer: the refusal names DELIVERY_PIXELS
          // (other FailedPreconditions, such as "join first", are not about
          // the mode).
          this.fallback(`the server refused snapshots (${why})`);
        } else if (!spectate && code === Code.FailedPrecondition && /join the game/i.test(why) && !rejoined) {
          // Away longer than the game keeps a seat (30 s without a stream: a
          // sleeping phone, a lost network): take a seat again and go on at once.
          rejoined = true;
          now = await session.game.joinGame({ gameId: this.o.gameId }, { signal }).then(() => true, () => false);
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
      failures = this.framesTotal > framesBefore ? 1 : failures + 1;
      if (failures >= MAX_FAILURES || waitMs > MAX_AUTO_WAIT_MS) {
        // Bounded: stop and let the player decide (at once for a limit that does
        // not refill by itself, such as too many open streams).
        this.status.set({ conn: "stopped" });
        const tries = failures >= MAX_FAILURES ? ` Stopped after ${failures} tries.` : "";
        this.status.say(`${said}${tries}`, "error", this.troubleActions(), raw || why);
        await this.wait(Infinity);
        failures = 0;
        backoff = BACKOFF_MIN_MS;
        this.status.say("Connecting…");
        continue;
      }
      const delay = Math.max(backoff * (0.75 + Math.random() / 2), waitMs);
      backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
      this.status.set({ conn: "retrying" });
      this.status.say(`${said} Trying again in ${Math.ceil(delay / 1000)} s (${failures}/${MAX_FAILURES}).`, "error", this.troubleActions(), raw || why);
      await this.wait(delay);
    }
    if (this.finished) this.status.set({ conn: "closed" });
  }

  /** Waits `ms` (Infinity: until Retry), or less when the view closes or Retry is pressed. */
  private wait(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const signal = this.abort.signal;
      const done = (): void => {
        clearTimeout(t);
        signal.removeEventListener("abort", done);
        if (this.retry === done) this.retry = null;
        resolve();
      };
      const t = Number.isFinite(ms) ? setTimeout(done, ms) : 0;
      signal.addEventListener("abort", done, { once: true });
      this.retry = done;
      if (signal.aborted) done();
    });
  }

  /** Retry (now) and Back to lobby, offered with connection trouble. */
  private troubleActions(): { label: string; run: () => void }[] {
    const actions = [{ label: "Retry", run: () => this.retry?.() }];
    if (this.o.onLeave) actions.push({ label: "Back to lobby", run: this.o.onLeave });
    return actions;
  }

  /**
   * One frame of the stream: decoded here (view, and what decoding took), or null
   * when the pixel worker decodes this stream.
   */
  private onFrame(frame: Frame, asked: Mode, decoded: { view: Uint8Array; decodeMs: number } | null): void {
    this.frames++;
    this.framesTotal++;
    this.bytes += frame.view.byteLength;
    this.status.set({ conn: "streaming", tick: frame.tick });
    if (this.reconnecting) {
      this.reconnecting = false;
      this.status.say("");
    }
    if (!decoded) {
      if (this.viewFormat && this.viewFormat !== INDEXED8) return;
      this.pixelWorker?.submit(frame);
      return;
    }
    const { view, decodeMs } = decoded;
    if (asked === "snapshots" && this.streamMode === null) {
      this.early = { tick: frame.tick, view, decodeMs }; // wait for the Status that says what it is
      return;
    }
    if (this.streamMode === "snapshots") {
      this.snap?.submit(frame.tick, view, decodeMs);
      return;
    }
    if (this.viewFormat && this.viewFormat !== INDEXED8) return;
    this.renderer.submit(view, frame.tick, { decodeMs, decodeOnPage: true, workerMs: 0, handoffMs: 0 });
  }

  /**
   * The pixel worker, started if need be; false when pixels are decoded here
   * (?decode=main, a browser without what it needs, or a worker that failed:
   * decodeWhy says which).
   */
  private startPixelWorker(): boolean {
    if (this.pixelWorker) return true;
    if (this.decodeWhy) return false;
    const lack = new URLSearchParams(location.search).get("decode") === "main" ? "?decode=main" : pixelWorkerSupport();
    if (lack) {
      this.decodeWhy = lack;
      return false;
    }
    const w: PixelWorker = new PixelWorker({
      onFrame: (bitmap, tick, decodeMs, ms, handoffMs) => {
        if (this.pixelWorker === w) this.renderer.submit(bitmap, tick, { decodeMs, decodeOnPage: false, workerMs: ms, handoffMs });
        else bitmap.close();
      },
      onProblem: (problem) => this.showOverlay(problem),
      onDecodeError: (message) => {
        // The first one says why; the frames after it fail for want of a base.
        if (this.pixelWorker !== w || this.decodeOn !== "worker" || !this.streamAbort || this.decodeFailure) return;
        this.decodeFailure = new Error(`frame codec: ${message}`);
        this.streamAbort?.abort();
      },
      onFail: (reason) => {
        if (this.pixelWorker !== w) return;
        // Decode here from now on: the stream starts again, with a keyframe.
        this.pixelWorker = null;
        this.decodeWhy = reason;
        if (this.decodeOn === "worker") {
          this.switching = true;
          this.streamAbort?.abort();
        }
      },
    });
    if (!w.start()) {
      this.decodeWhy = "the decoding worker did not start";
      return false;
    }
    this.pixelWorker = w;
    return true;
  }

  private onStatus(s: Status, asked: Mode): void {
    if (s.viewFormat) this.setFormat(s.viewFormat);
    // The first Status of every stream carries the module's metadata; none
    // (an older server): present the game as the arena, as this page always did.
    // Every stream's first status repeats the module's metadata: apply it when
    // it changed (a new build), not again on each re-attach.
    if ((s.moduleMeta && s.moduleMeta !== this.serverMeta) || this.metaJson === null) {
      this.serverMeta = s.moduleMeta;
      this.applyMeta(s.moduleMeta);
    }
    if (s.migrationMs > 0n) {
      this.migrations++;
      hooks.migrations = this.migrations;
      hooks.lastMigrationMs = Number(s.migrationMs);
      const from = s.previousNodeId ? ` from ${s.previousNodeId}` : "";
      this.status.set({ migrations: `${this.migrations} (last ${s.migrationMs} ms)` });
      this.status.explain("migrations", `last move${from} took ${s.migrationMs} ms`);
    }
    if (this.streamMode === null) this.startDelivery(s, asked);
    else if (this.streamMode === "snapshots" && s.buildId && this.snap && s.buildId !== this.snap.module) this.snap.load(s.buildId);
    this.status.set({ node: s.nodeId, region: s.region, tick: s.tick, state: s.state });
    rememberRegion(s.region);
    if (!this.o.spectate && s.slot >= 0) this.status.set({ slot: s.slot });
    switch (s.state) {
      case "ended": {
        this.o.onGone?.();
        const result = describeResult(s.resultJson, this.o.spectate ? -1 : s.slot);
        if (result) {
          this.showOverlay(`Match over. ${result.headline}\n${result.scores}`);
          this.finish(`Match over: ${result.headline} Scores: ${result.scores}.`, "ok", s.message);
        } else {
          this.finish(s.message ? `Match over: ${s.message}` : "Match over.", "ok");
        }
        break;
      }
      case "failed": {
        this.o.onGone?.();
        // An operator ended it (FleetService.EndGame): say so, with their reason.
        const byOperator = /ended by an operator: ([^\n]*)/.exec(s.message);
        if (byOperator) {
          this.finish(`The game was ended by its operators: ${byOperator[1]}`, "error");
          break;
        }
        // The server's reason (a module's trap, a desync after a move, with
        // its likely causes) is for the studio: under "details".
        this.status.set({ reason: s.message });
        this.finish("The game stopped because of an error on the server (the reason is under “details”).", "error", s.message);
        break;
      }
      case "migrating":
        this.status.say("Moving the game to another server…");
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
          onFrame: (bitmap, tick, ms, moduleMs, decodeMs) => {
            this.times.add(ms);
            this.moduleTimes.add(moduleMs);
            this.renderer.submit(bitmap, tick, { decodeMs, decodeOnPage: true, workerMs: ms, handoffMs: 0 });
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
    this.costs.reset();
    this.showMode();
    const early = this.early;
    this.early = null;
    if (early && this.snap && this.streamMode === "snapshots") this.snap.submit(early.tick, early.view, early.decodeMs);
    else if (early && this.streamMode === "pixels") this.renderer.submit(early.view, early.tick, { decodeMs: early.decodeMs, decodeOnPage: true, workerMs: 0, handoffMs: 0 });
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
    this.costs.reset();
    this.showMode();
    this.status.say("Drawing on the server instead (this browser could not run the game's renderer).", "", [], reason);
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
    // The one-line bar says the mode; the reason is in the details and the hover text.
    this.status.set({ mode, why: text });
    this.status.explain("mode", text);
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
    const costs = this.costs.costs();
    hooks.frameCosts = costs;
    const where = this.decodeOn === "worker" && this.streamMode === "pixels" ? "worker" : "page";
    this.status.set({ render: med === null ? "" : `${med.toFixed(2)} ms`, cost: costs ? describeCosts(costs, where) : "" });
    this.o.canvas.dataset["frames"] = String(hooks.framesDrawn);
    this.o.canvas.dataset["renderMs"] = med === null ? "" : med.toFixed(3);
  }

  /** The hash of the indexed8 frame last drawn (test hook). */
  private async lastFrame(): Promise<FrameHash | null> {
    if (this.streamMode === "snapshots") {
      const h = await this.snap?.hash();
      return h && h.size > 0 ? { mode: "snapshots", tick: String(h.tick), sha256: h.sha256, size: h.size } : null;
    }
    if (this.decodeOn === "worker" && this.pixelWorker) {
      const h = await this.pixelWorker.hash();
      return h && h.size > 0 ? { mode: "pixels", tick: String(h.tick), sha256: h.sha256, size: h.size } : null;
    }
    const view = this.renderer.lastView;
    if (!view) return null;
    return { mode: "pixels", tick: String(this.renderer.lastTick), sha256: await sha256Hex(view), size: view.length };
  }

  private finish(message: string, kind: "ok" | "error", detail = ""): void {
    this.finished = true;
    this.stopInput();
    const back = this.o.onLeave ? [{ label: "Back to lobby", run: this.o.onLeave }] : [];
    this.status.say(message, kind, back, detail);
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

/** "0.61 ms, p95 0.95 (decode 0.20 on the page, worker 0.00, draw 0.38; main thread 0.60, p95 0.93) of 512 frames". */
function describeCosts(c: FrameCosts, decodeOn: "page" | "worker"): string {
  const f = (v: number): string => v.toFixed(2);
  return `${f(c.frameMsP50)} ms, p95 ${f(c.frameMsP95)} (decode ${f(c.decodeMsP50)} ${decodeOn === "worker" ? "in the worker" : "on the page"}, ` +
    `worker ${f(c.workerMsP50)}, draw ${f(c.drawMsP50)}; main thread ${f(c.mainMsP50)}, p95 ${f(c.mainMsP95)}) of ${c.samples} frames`;
}

function unsupported(format: string): string {
  return `This game's view format "${format}" is not supported by the web client.`;
}

