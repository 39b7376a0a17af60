// Keys, touch buttons and the mouse to the module's input (its declared controls,
// meta.ts), and sending the held-buttons payload as inputs.

import { Code, ConnectError } from "@connectrpc/connect";

import { refusalWait } from "./api";
import { InputGapSchema } from "./gen/ludus/v1/game_pb";
import { inputBytes, payloadOf, type Control } from "./meta";

/**
 * The key name a control lists to ask for mouse look (docs/ABI.md, "Metadata for
 * pages"): with the pointer locked on the view, the mouse's primary button holds
 * that control and its horizontal movement is sent after the mask as the aim.
 */
export const MOUSE = "Mouse";
/** Aim per CSS pixel of horizontal movement, in 65536ths of a turn: 4096 px a turn. */
export const AIM_PER_PX = 16;
/**
 * Inputs that only move the aim are sent at most this often: the gateway allows
 * 60 inputs/s per account, and the game turns a player at most one step a tick
 * (35/s) anyway. Changes of the held buttons go at once.
 */
export const AIM_MS = 40;

/** Mouse look: "none" (not declared), "ready" (click the view), "locked", "refused". */
export type MouseState = "none" | "ready" | "locked" | "refused";

/**
 * A payload with mouse look: the held-bits mask (n bytes, little-endian), then the
 * aim (int32, the running total of movement since the lock, right positive) and
 * the lock's id (uint16), little-endian.
 */
export function aimPayload(mask: number, n: number, aim: number, lock: number): Uint8Array {
  const out = new Uint8Array(n + 6);
  out.set(payloadOf(mask, n));
  const v = new DataView(out.buffer);
  v.setInt32(n, aim | 0, true);
  v.setUint16(n + 4, lock & 0xffff, true);
  return out;
}

/**
 * HeldControls turns the module's controls into a held-bits mask: keys held on
 * `window` (KeyboardEvent.code, so WASD works on any layout), on-screen buttons
 * held with any pointer (touch, pen, mouse) and, for a module that asks for the
 * mouse, its button while the pointer is locked on the view. It reports the payload
 * each time the mask changes, and while the pointer is locked each time the aim
 * moves (at most every AIM_MS). Losing focus or hiding the page releases everything.
 *
 * Mouse look sends a running total, not deltas: held-button inputs are "state"
 * (a later one supersedes an earlier one, which may never be applied), so each
 * input carries everything the game needs, and the game turns the player by the
 * difference to the last total it saw (games/arena takeAim). A lock starts the
 * total at 0 under a new random lock id, so a game never mixes two locks' totals.
 */
export class HeldControls {
  private keyBits = new Map<string, number>();
  private readonly keys = new Set<string>();
  /** Pointer id → bit held through an on-screen button. */
  private readonly pointers = new Map<number, number>();
  private mask = 0;
  private bytes = 0;
  private pad: HTMLElement | null = null;

  /** The bit the mouse button holds, or -1 when the module does not ask for the mouse. */
  private mouseBit = -1;
  private view: HTMLElement | null = null;
  private locked = false;
  private refused = false;
  private mouseHeld = false;
  /** Running aim total of this lock (int32) and the part of a unit not yet counted. */
  private aim = 0;
  private aimFrac = 0;
  private lock = 0;
  /** What the last payload said: with mouse look or not, and the aim. */
  private sentLooking = false;
  private sentAim = 0;
  private sentAt = -Infinity;
  private aimTimer = 0;
  /** Mouse look changed state (for the page's hint line). */
  onMouse: (state: MouseState) => void = () => {};

  constructor(private readonly onChange: (payload: Uint8Array, mask: number) => void) {
    window.addEventListener("keydown", this.down);
    window.addEventListener("keyup", this.up);
    window.addEventListener("blur", this.release);
    document.addEventListener("visibilitychange", this.hidden);
  }

  /** Uses these controls from now on (held keys of the old ones are released). */
  setControls(controls: readonly Control[]): void {
    this.keyBits = new Map();
    this.mouseBit = -1;
    for (const c of controls) {
      for (const k of c.keys) {
        if (k === MOUSE) this.mouseBit = c.bit;
        else this.keyBits.set(k, c.bit);
      }
    }
    this.bytes = inputBytes(controls);
    this.keys.clear();
    this.pointers.clear();
    this.mouseHeld = false;
    if (this.mouseBit < 0) this.unlock();
    this.renderPad(controls);
    this.update();
    this.tellMouse();
  }

  /** On-screen buttons, one per control, go into `el` (touch screens). */
  attachPad(el: HTMLElement): void {
    this.pad = el;
  }

  /**
   * The view (the canvas): a click with the mouse's primary button locks the
   * pointer on it when the module asks for the mouse. Esc (the browser's) releases.
   */
  attachView(el: HTMLElement): void {
    this.view = el;
    el.addEventListener("pointerdown", this.viewDown);
    document.addEventListener("pointerlockchange", this.lockChange);
    document.addEventListener("pointerlockerror", this.lockError);
    document.addEventListener("mousemove", this.mouseMove);
    document.addEventListener("mousedown", this.mouseButton);
    document.addEventListener("mouseup", this.mouseButton);
    this.tellMouse();
  }

  /** Mouse look's state, for hints and tests. */
  get mouse(): MouseState {
    if (this.mouseBit < 0 || !this.view) return "none";
    if (this.locked) return "locked";
    return this.refused ? "refused" : "ready";
  }

  /** The aim total the last payload carried, and its lock id (tests, details). */
  get aimSent(): { aim: number; lock: number } {
    return { aim: this.sentAim, lock: this.sentLooking ? this.lock : 0 };
  }

  dispose(): void {
    window.removeEventListener("keydown", this.down);
    window.removeEventListener("keyup", this.up);
    window.removeEventListener("blur", this.release);
    document.removeEventListener("visibilitychange", this.hidden);
    if (this.view) {
      this.view.removeEventListener("pointerdown", this.viewDown);
      document.removeEventListener("pointerlockchange", this.lockChange);
      document.removeEventListener("pointerlockerror", this.lockError);
      document.removeEventListener("mousemove", this.mouseMove);
      document.removeEventListener("mousedown", this.mouseButton);
      document.removeEventListener("mouseup", this.mouseButton);
      this.unlock();
      this.view = null;
    }
    clearTimeout(this.aimTimer);
    this.keys.clear();
    this.pointers.clear();
    this.pad?.replaceChildren();
  }

  private unlock(): void {
    if (this.view && document.pointerLockElement === this.view) document.exitPointerLock();
  }

  private tellMouse(): void {
    this.onMouse(this.mouse);
  }

  private readonly viewDown = (e: PointerEvent): void => {
    // Touch and pen keep the on-screen buttons; only a mouse locks the pointer.
    if (this.mouseBit < 0 || this.locked || e.pointerType !== "mouse" || e.button !== 0) return;
    const view = this.view;
    if (!view) return;
    try {
      // A promise in current browsers, undefined in older ones; either may fail.
      Promise.resolve(view.requestPointerLock()).catch(() => this.lockError());
    } catch {
      this.lockError();
    }
  };

  private readonly lockChange = (): void => {
    const locked = this.view !== null && document.pointerLockElement === this.view;
    if (locked === this.locked) return;
    this.locked = locked;
    this.mouseHeld = false;
    if (locked) {
      this.refused = false;
      // A new lock: a new id and a total from 0 (see the class comment).
      let id = this.lock;
      while (id === this.lock || id === 0) id = 1 + Math.floor(Math.random() * 0xffff);
      this.lock = id;
      this.aim = 0;
      this.aimFrac = 0;
    }
    this.update();
    this.tellMouse();
  };

  private readonly lockError = (): void => {
    if (this.locked) return;
    this.refused = true;
    this.tellMouse();
  };

  private readonly mouseMove = (e: MouseEvent): void => {
    if (!this.locked || !e.movementX) return;
    this.aimFrac += e.movementX * AIM_PER_PX;
    const whole = Math.trunc(this.aimFrac);
    this.aimFrac -= whole;
    this.aim = (this.aim + whole) | 0; // int32, wrapping like the game's total
    this.update();
  };

  private readonly mouseButton = (e: MouseEvent): void => {
    if (!this.locked || e.button !== 0) return;
    e.preventDefault();
    this.mouseHeld = e.type === "mousedown";
    this.update();
  };

  private renderPad(controls: readonly Control[]): void {
    const pad = this.pad;
    if (!pad) return;
    pad.replaceChildren(
      ...controls.map((c) => {
        const b = document.createElement("button");
        b.type = "button";
        b.textContent = c.label;
        b.dataset["bit"] = String(c.bit);
        b.setAttribute("aria-label", `hold to ${c.label}`);
        b.addEventListener("pointerdown", (e) => {
          e.preventDefault();
          try {
            b.setPointerCapture(e.pointerId);
          } catch {
            // synthetic events have no active pointer to capture
          }
          this.pointers.set(e.pointerId, c.bit);
          b.classList.add("held");
          this.update();
        });
        const lift = (e: PointerEvent): void => {
          if (this.pointers.get(e.pointerId) !== c.bit) return;
          this.pointers.delete(e.pointerId);
          if (![...this.pointers.values()].includes(c.bit)) b.classList.remove("held");
          this.update();
        };
        b.addEventListener("pointerup", lift);
        b.addEventListener("pointercancel", lift);
        b.addEventListener("lostpointercapture", lift);
        b.addEventListener("contextmenu", (e) => e.preventDefault());
        return b;
      }),
    );
  }

  private readonly down = (e: KeyboardEvent): void => {
    if (!this.keyBits.has(e.code) || e.ctrlKey || e.metaKey || e.altKey || isTyping(e.target)) return;
    e.preventDefault();
    this.keys.add(e.code);
    this.update();
  };

  private readonly up = (e: KeyboardEvent): void => {
    if (!this.keyBits.has(e.code)) return;
    if (!isTyping(e.target)) e.preventDefault();
    this.keys.delete(e.code);
    this.update();
  };

  private readonly release = (): void => {
    this.keys.clear();
    this.pointers.clear();
    this.mouseHeld = false;
    this.pad?.querySelectorAll(".held").forEach((b) => b.classList.remove("held"));
    this.update();
  };

  private readonly hidden = (): void => {
    if (document.hidden) this.release();
  };

  private update(): void {
    let mask = 0;
    for (const code of this.keys) mask |= 1 << (this.keyBits.get(code) ?? 0);
    for (const bit of this.pointers.values()) mask |= 1 << bit;
    if (this.mouseHeld && this.mouseBit >= 0) mask |= 1 << this.mouseBit;
    mask >>>= 0;
    if (this.bytes === 0) return;
    const looking = this.locked;
    if (mask === this.mask && looking === this.sentLooking) {
      // Only the aim moved (or nothing did): at most one input per AIM_MS.
      if (!looking || this.aim === this.sentAim || this.aimTimer) return;
      const wait = this.sentAt + AIM_MS - performance.now();
      if (wait > 0) {
        this.aimTimer = window.setTimeout(() => {
          this.aimTimer = 0;
          this.update();
        }, wait);
        return;
      }
    }
    clearTimeout(this.aimTimer);
    this.aimTimer = 0;
    this.mask = mask;
    this.sentLooking = looking;
    this.sentAim = looking ? this.aim : 0;
    this.sentAt = performance.now();
    // Without the pointer locked the payload is the mask alone, byte for byte
    // what pages sent before mouse look.
    this.onChange(looking ? aimPayload(mask, this.bytes, this.aim, this.lock) : payloadOf(mask, this.bytes), mask);
  }
}

function isTyping(target: EventTarget | null): boolean {
  return target instanceof HTMLInputElement || target instanceof HTMLTextAreaElement || target instanceof HTMLSelectElement;
}

export interface Ack {
  seq: bigint;
  ackedSeq: bigint;
  tick: bigint;
  latencyMs: number;
}

export type SendFn = (
  seq: bigint,
  payload: Uint8Array,
  signal: AbortSignal,
) => Promise<{ ackedSeq: bigint; tick: bigint; supersededBySeq: bigint }>;

const MAX_IN_FLIGHT = 3;
const RETRY_MS = 1000;

/**
 * InputSender sends the held-buttons payload each time it changes, one sequence number per input.
 * Sends are not serialised: up to MAX_IN_FLIGHT run at once, and when that many are
 * pending the newest mask waits and is sent as soon as one returns (intermediate masks
 * are skipped). A failed send is retried with the newest mask after RETRY_MS.
 *
 * Sequence numbers start at the wall clock in milliseconds, so a reloaded page (or a
 * second tab of the same account) continues above the numbers it used before instead
 * of being taken for duplicates; an ack above anything this page sent moves it past.
 * A game of "event" inputs applies a seat's inputs in order from 1 and refuses one far
 * ahead with Aborted and an InputGap naming the seq it waits for: the sender then
 * numbers on from that seq and sends the newest payload at once (the inputs it had in
 * flight were refused too, and their payloads are older).
 *
 * A send that fails for a passing reason (the game moving to another node, the
 * network, a rate) may or may not have reached the game. For "state" inputs the
 * newest payload goes again under a new seq (an older one is worth nothing once a
 * newer is applied). An "event" input is re-sent as it was, same seq and payload,
 * before anything newer: the game applies a seq at most once, and a new seq in its
 * place would leave a gap that holds every later input until the game gives up
 * waiting (1 s) and refuses them.
 */
export class InputSender {
  private desired: Uint8Array = new Uint8Array(0);
  /** The payload last handed to the network, or null when the newest must be (re)sent. */
  private sent: Uint8Array | null = null;
  private nextSeq = BigInt(Date.now());
  /** Counts renumberings: a refusal of an input numbered before the last one is stale. */
  private numbering = 0;
  private inFlight = 0;
  /** Event inputs whose send failed for a passing reason, to go again as they were. */
  private resend: { seq: bigint; payload: Uint8Array }[] = [];
  /** The game's inputs are "event" ones (every input applies, in seq order). */
  events = false;
  private blockedUntil = 0;
  private retryTimer = 0;
  private readonly abort = new AbortController();
  onAck: (ack: Ack) => void = () => {};
  onError: (err: unknown) => void = () => {};

  constructor(private readonly send: SendFn) {}

  /** Sets the held buttons' payload; sent if it differs from the last one sent. */
  set(payload: Uint8Array): void {
    this.desired = payload;
    this.pump();
  }

  stop(): void {
    this.abort.abort();
    clearTimeout(this.retryTimer);
  }

  private pump(): void {
    const signal = this.abort.signal;
    while (!signal.aborted && this.inFlight < MAX_IN_FLIGHT && (this.resend.length > 0 || !same(this.desired, this.sent))) {
      const wait = this.blockedUntil - performance.now();
      if (wait > 0) {
        clearTimeout(this.retryTimer);
        this.retryTimer = window.setTimeout(() => this.pump(), wait);
        return;
      }
      let payload: Uint8Array;
      let seq: bigint;
      const again = this.resend.shift();
      if (again) {
        ({ seq, payload } = again);
      } else {
        payload = this.desired;
        seq = this.nextSeq++;
        this.sent = payload;
      }
      const numbering = this.numbering;
      this.inFlight++;
      const t0 = performance.now();
      this.send(seq, payload, signal).then(
        (res) => {
          this.inFlight--;
          if (signal.aborted) return;
          this.onAck({ seq, ackedSeq: res.ackedSeq, tick: res.tick, latencyMs: performance.now() - t0 });
          // An OK means this input is durable, or (held buttons are a "state"
          // input) that a later one is: supersededBySeq names it. A later one
          // that this page never sent (another tab of the account) means ours
          // are stale: continue above it and send the current mask again.
          if (res.supersededBySeq >= this.nextSeq) {
            this.nextSeq = res.supersededBySeq + 1n;
            this.sent = null;
          }
          this.pump();
        },
        (err: unknown) => {
          this.inFlight--;
          if (signal.aborted) return;
          const missing = missingSeq(err);
          if (missing !== null) {
            if (numbering === this.numbering) {
              this.numbering++;
              this.nextSeq = missing;
              this.sent = null;
              this.resend = []; // older than what the game asks for now
            }
            this.pump();
            return;
          }
          this.onError(err);
          if (this.events && passing(err)) {
            if (numbering === this.numbering) {
              this.resend.push({ seq, payload });
              this.resend.sort((a, b) => (a.seq < b.seq ? -1 : a.seq > b.seq ? 1 : 0));
            }
          } else {
            this.sent = null;
          }
          this.blockedUntil = performance.now() + RETRY_MS;
          this.pump();
        },
      );
    }
  }
}

/**
 * Whether a send failed for a reason that passes (the game moving, the network, a
 * rate, a timeout), so that the same input may be sent again as it was.
 */
function passing(err: unknown): boolean {
  const ce = ConnectError.from(err);
  switch (ce.code) {
    case Code.Unavailable:
    case Code.DeadlineExceeded:
    case Code.Unknown:
      return true;
    case Code.ResourceExhausted:
      // A rate ("retry in N s") passes; a player's share of the game's input log
      // does not.
      return refusalWait(ce) > 0;
  }
  return false;
}

/** The seq an event game waits for, when err refused an input for a gap before it. */
function missingSeq(err: unknown): bigint | null {
  const ce = ConnectError.from(err);
  if (ce.code !== Code.Aborted) return null;
  const gap = ce.findDetails(InputGapSchema)[0];
  return gap && gap.missingSeq > 0n ? gap.missingSeq : null;
}

function same(a: Uint8Array, b: Uint8Array | null): boolean {
  return b !== null && a.length === b.length && a.every((v, i) => v === b[i]);
}
