// Keyboard to arena button mask, and sending masks as inputs.

/** Arena input bits (docs/ABI.md, "Arena input payload"). */
export const Button = {
  forward: 1 << 0,
  back: 1 << 1,
  turnLeft: 1 << 2,
  turnRight: 1 << 3,
  strafeLeft: 1 << 4,
  strafeRight: 1 << 5,
  fire: 1 << 6,
} as const;

/** Physical key (KeyboardEvent.code, so WASD works on any layout) to button. */
const KEYS: Readonly<Record<string, number>> = {
  ArrowUp: Button.forward,
  KeyW: Button.forward,
  ArrowDown: Button.back,
  KeyS: Button.back,
  ArrowLeft: Button.turnLeft,
  KeyA: Button.turnLeft,
  ArrowRight: Button.turnRight,
  KeyD: Button.turnRight,
  KeyQ: Button.strafeLeft,
  KeyE: Button.strafeRight,
  Space: Button.fire,
};

/**
 * Keyboard tracks the held game keys on `window` and reports the button mask each time
 * it changes. Losing focus releases every key.
 */
export class Keyboard {
  private readonly held = new Set<string>();
  private mask = 0;

  constructor(private readonly onChange: (mask: number) => void) {
    window.addEventListener("keydown", this.down);
    window.addEventListener("keyup", this.up);
    window.addEventListener("blur", this.release);
    document.addEventListener("visibilitychange", this.hidden);
  }

  dispose(): void {
    window.removeEventListener("keydown", this.down);
    window.removeEventListener("keyup", this.up);
    window.removeEventListener("blur", this.release);
    document.removeEventListener("visibilitychange", this.hidden);
    this.held.clear();
  }

  private readonly down = (e: KeyboardEvent): void => {
    if (!(e.code in KEYS) || e.ctrlKey || e.metaKey || e.altKey || isTyping(e.target)) return;
    e.preventDefault();
    this.held.add(e.code);
    this.update();
  };

  private readonly up = (e: KeyboardEvent): void => {
    if (!(e.code in KEYS)) return;
    if (!isTyping(e.target)) e.preventDefault();
    this.held.delete(e.code);
    this.update();
  };

  private readonly release = (): void => {
    this.held.clear();
    this.update();
  };

  private readonly hidden = (): void => {
    if (document.hidden) this.release();
  };

  private update(): void {
    let mask = 0;
    for (const code of this.held) mask |= KEYS[code] ?? 0;
    if (mask !== this.mask) {
      this.mask = mask;
      this.onChange(mask);
    }
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
 * InputSender sends a button mask each time it changes, one sequence number per input.
 * Sends are not serialised: up to MAX_IN_FLIGHT run at once, and when that many are
 * pending the newest mask waits and is sent as soon as one returns (intermediate masks
 * are skipped). A failed send is retried with the newest mask after RETRY_MS.
 *
 * Sequence numbers start at the wall clock in milliseconds, so a reloaded page (or a
 * second tab of the same account) continues above the numbers it used before instead
 * of being taken for duplicates; an ack above anything this page sent moves it past.
 */
export class InputSender {
  private desired = 0;
  /** The mask last handed to the network, or -1 when the newest must be (re)sent. */
  private sent = -1;
  private nextSeq = BigInt(Date.now());
  private inFlight = 0;
  private blockedUntil = 0;
  private retryTimer = 0;
  private readonly abort = new AbortController();
  onAck: (ack: Ack) => void = () => {};
  onError: (err: unknown) => void = () => {};

  constructor(private readonly send: SendFn) {}

  /** Sets the held buttons; sent if they differ from the last mask sent. */
  set(mask: number): void {
    this.desired = mask & 0xff;
    this.pump();
  }

  stop(): void {
    this.abort.abort();
    clearTimeout(this.retryTimer);
  }

  private pump(): void {
    const signal = this.abort.signal;
    while (!signal.aborted && this.inFlight < MAX_IN_FLIGHT && this.desired !== this.sent) {
      const wait = this.blockedUntil - performance.now();
      if (wait > 0) {
        clearTimeout(this.retryTimer);
        this.retryTimer = window.setTimeout(() => this.pump(), wait);
        return;
      }
      const mask = this.desired;
      const seq = this.nextSeq++;
      this.sent = mask;
      this.inFlight++;
      const t0 = performance.now();
      this.send(seq, Uint8Array.of(mask), signal).then(
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
            this.sent = -1;
          }
          this.pump();
        },
        (err: unknown) => {
          this.inFlight--;
          if (signal.aborted) return;
          this.onError(err);
          this.sent = -1;
          this.blockedUntil = performance.now() + RETRY_MS;
          this.pump();
        },
      );
    }
  }
}
