// The status bar under the canvas: one line for players (frames/s, round trip,
// bandwidth, region, delivery mode, migrations) that never wraps, developer
// details behind a "details" toggle, and a message line with optional actions
// (Retry, Back to lobby).

/** Fields on the one-line bar: label shown after the value, as in "17 fps". */
const MAIN = {
  fps: "fps",
  rtt: "rtt",
  kbps: "kbit/s",
  region: "",
  mode: "",
  migrations: "moves",
} as const;

/** Fields behind "details". */
const DETAILS = {
  conn: "connection",
  game: "game",
  slot: "slot",
  tick: "tick",
  node: "node",
  state: "state",
  render: "render/frame",
  cost: "frame cost",
  ack: "input ack",
  mouse: "mouse look",
  why: "delivery",
  reason: "stop reason",
} as const;

/** What the main fields mean, for screen readers and hover. */
const TITLES: Partial<Record<Field, string>> = {
  fps: "frames drawn per second",
  rtt: "round trip to the gateway (Ping)",
  kbps: "kilobits per second received",
  region: "region of the server running the game",
  mode: "snapshots: drawn here by the game's own renderer; pixels: drawn on the server",
  migrations: "times the game moved to another server, and how long the last move took",
};

export type Field = keyof typeof MAIN | keyof typeof DETAILS;

export interface Action {
  label: string;
  run: () => void;
}

/**
 * StatusBar shows labelled fields (each value element carries `data-field`, for tests)
 * and one message line.
 */
export class StatusBar {
  private readonly values = new Map<Field, HTMLElement>();
  private readonly message: HTMLElement;
  private readonly text: HTMLElement;
  private readonly actions: HTMLElement;
  private readonly details: HTMLElement;

  constructor(root: HTMLElement) {
    const line = document.createElement("div");
    line.className = "line";
    for (const [key, unit] of Object.entries(MAIN) as [Field, string][]) {
      const item = document.createElement("span");
      item.className = "field";
      const v = document.createElement("span");
      v.textContent = "—";
      v.dataset["field"] = key;
      item.append(v);
      if (unit) item.append(` ${unit}`);
      const title = TITLES[key];
      if (title) item.title = title;
      line.append(item);
      this.values.set(key, v);
    }
    const toggle = document.createElement("button");
    toggle.type = "button";
    toggle.className = "toggle";
    toggle.textContent = "details";
    toggle.setAttribute("aria-expanded", "false");
    line.append(toggle);

    const dl = document.createElement("dl");
    dl.className = "details";
    dl.id = "status-details";
    dl.hidden = true;
    toggle.setAttribute("aria-controls", dl.id);
    toggle.addEventListener("click", () => {
      dl.hidden = !dl.hidden;
      toggle.setAttribute("aria-expanded", String(!dl.hidden));
    });
    for (const [key, label] of Object.entries(DETAILS) as [Field, string][]) {
      const item = document.createElement("div");
      const dt = document.createElement("dt");
      const dd = document.createElement("dd");
      dt.textContent = label;
      dd.textContent = "—";
      dd.dataset["field"] = key;
      item.append(dt, dd);
      dl.append(item);
      this.values.set(key, dd);
    }
    this.details = dl;

    this.message = document.createElement("div");
    this.message.className = "message";
    this.text = document.createElement("span");
    this.text.setAttribute("role", "status");
    this.actions = document.createElement("span");
    this.actions.className = "actions";
    this.message.append(this.text, this.actions);
    this.message.hidden = true;
    root.replaceChildren(line, dl, this.message);
  }

  /** Whether the details are shown (tests). */
  get detailsShown(): boolean {
    return !this.details.hidden;
  }

  set(values: Partial<Record<Field, string | number | bigint>>): void {
    for (const [key, value] of Object.entries(values) as [Field, unknown][]) {
      const el = this.values.get(key);
      const text = value === "" ? "—" : String(value);
      if (el && el.textContent !== text) el.textContent = text;
    }
  }

  /** Sets a field's hover text (the full delivery explanation, a raw error). */
  explain(key: Field, title: string): void {
    const el = this.values.get(key);
    if (el) el.title = title;
  }

  /**
   * Shows a message; `kind` styles it ("error", "ok" or plain); `actions` become
   * buttons after it. `detail` (e.g. the raw error code) is the hover text.
   */
  say(text: string, kind: "" | "ok" | "error" = "", actions: Action[] = [], detail = ""): void {
    this.text.textContent = text;
    this.text.title = detail;
    this.message.className = `message ${kind}`.trim();
    this.actions.replaceChildren(
      ...actions.map((a) => {
        const b = document.createElement("button");
        b.type = "button";
        b.textContent = a.label;
        b.addEventListener("click", a.run, { once: true });
        return b;
      }),
    );
    this.message.hidden = text === "" && actions.length === 0;
  }

  /** The message shown, for the page's own checks. */
  get said(): string {
    return this.text.textContent ?? "";
  }
}
