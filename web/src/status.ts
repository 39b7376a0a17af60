// The status bar under the canvas.

const FIELDS = {
  conn: "connection",
  mode: "mode",
  game: "game",
  slot: "slot",
  node: "node",
  region: "region",
  tick: "tick",
  state: "state",
  fps: "frames/s",
  render: "render/frame",
  ack: "input ack",
} as const;

export type Field = keyof typeof FIELDS;

/**
 * StatusBar shows labelled fields (each value element carries `data-field`, for tests)
 * and one message line.
 */
export class StatusBar {
  private readonly values = new Map<Field, HTMLElement>();
  private readonly message: HTMLElement;

  constructor(root: HTMLElement) {
    const fields = document.createElement("dl");
    for (const [key, label] of Object.entries(FIELDS) as [Field, string][]) {
      const item = document.createElement("div");
      const dt = document.createElement("dt");
      const dd = document.createElement("dd");
      dt.textContent = label;
      dd.textContent = "—";
      dd.dataset["field"] = key;
      item.append(dt, dd);
      fields.append(item);
      this.values.set(key, dd);
    }
    this.message = document.createElement("p");
    this.message.className = "message";
    this.message.setAttribute("role", "status");
    root.replaceChildren(fields, this.message);
  }

  set(values: Partial<Record<Field, string | number | bigint>>): void {
    for (const [key, value] of Object.entries(values) as [Field, unknown][]) {
      const el = this.values.get(key);
      const text = value === "" ? "—" : String(value);
      if (el && el.textContent !== text) el.textContent = text;
    }
  }

  /** Shows a message; `kind` styles it ("error", "ok" or plain). */
  say(text: string, kind: "" | "ok" | "error" = ""): void {
    this.message.textContent = text;
    this.message.className = `message ${kind}`.trim();
  }
}
