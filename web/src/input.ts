// Keys and touch buttons to the module's input (its declared controls, meta.ts),
// and sending the held-buttons payload as inputs.

import { inputBytes, payloadOf, type Control } from "./meta";

/**
 * HeldControls turns the module's controls into a held-bits mask: keys held on
 * `window` (KeyboardEvent.code, so WASD works on any layout) and on-screen buttons
 * held with any pointer (touch, pen, mouse). It reports the payload each time the
 * mask changes. Losing focus or hiding the page releases everything.
 */
export class HeldControls {
  private keyBits = new Map<string, number>();
  private readonly keys = new Set<string>();
  /** Pointer id → bit held through an on-screen button. */
  private readonly pointers = new Map<number, number>();
  private mask = 0;
  private bytes = 0;
  private pad: HTMLElement | null = null;

  constructor(private readonly onChange: (payload: Uint8Array, mask: number) => void) {
    window.addEventListener("keydown", this.down);
    window.addEventListener("keyup", this.up);
    window.addEventListener("blur", this.release);
    document.addEventListener("visibilitychange", this.hidden);
  }

  /** Uses these controls from now on (held keys of the old ones are released). */
  setControls(controls: readonly Control[]): void {
    this.keyBits = new Map();
    for (const c of controls) for (const k of c.keys) this.keyBits.set(k, c.bit);
    this.bytes = inputBytes(controls);
    this.keys.clear();
    this.pointers.clear();
    this.renderPad(controls);
    this.update();
  }

  /** On-screen buttons, one per control, go into `el` (touch screens). */
  attachPad(el: HTMLElement): void {
    this.pad = el;
  }

  dispose(): void {
    window.removeEventListener("keydown", this.down);
    window.removeEventListener("keyup", this.up);
    window.removeEventListener("blur", this.release);
    document.removeEventListener("visibilitychange", this.hidden);
    this.keys.clear();
    this.pointers.clear();
    this.pad?.replaceChildren();
  }

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
    mask >>>= 0;
    if (this.bytes === 0 || mask === this.mask) return;
    this.mask = mask;
    this.onChange(payloadOf(mask, this.bytes), mask);
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
 */
export class InputSender {
  private desired: Uint8Array = new Uint8Array(0);
  /** The payload last handed to the network, or null when the newest must be (re)sent. */
  private sent: Uint8Array | null = null;
  private nextSeq = BigInt(Date.now());
  private inFlight = 0;
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
    while (!signal.aborted && this.inFlight < MAX_IN_FLIGHT && !same(this.desired, this.sent)) {
      const wait = this.blockedUntil - performance.now();
      if (wait > 0) {
        clearTimeout(this.retryTimer);
        this.retryTimer = window.setTimeout(() => this.pump(), wait);
        return;
      }
      const payload = this.desired;
      const seq = this.nextSeq++;
      this.sent = payload;
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
          this.onError(err);
          this.sent = null;
          this.blockedUntil = performance.now() + RETRY_MS;
          this.pump();
        },
      );
    }
  }
}

function same(a: Uint8Array, b: Uint8Array | null): boolean {
  return b !== null && a.length === b.length && a.every((v, i) => v === b[i]);
}
