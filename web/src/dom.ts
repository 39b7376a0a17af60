// Small DOM helpers shared by the studio console (console.ts) and the player
// site (main.ts, account.ts): elements by id, tables, notes that say what went
// wrong in words with the raw error on hover.

import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { Timestamp } from "@bufbuild/protobuf/wkt";

type Child = Node | string;

/** The page's element with this id; a missing one is a bug in the page. */
export function byId<T extends HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`page is missing #${id}`);
  return el as T;
}

/** An element with attributes (`class`, `for`, `aria-*`, …) and children. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | boolean | undefined> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue;
    e.setAttribute(k, v === true ? "" : v);
  }
  e.append(...children);
  return e;
}

/** A labelled input: the label and the input, wrapped in `.field`. */
export function field(label: string, input: HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement): HTMLDivElement {
  if (!input.id) throw new Error(`field ${label} has no id`);
  return h("div", { class: "field" }, h("label", { for: input.id }, label), input);
}

export function input(id: string, attrs: Record<string, string | boolean | undefined> = {}): HTMLInputElement {
  return h("input", { id, name: id, autocomplete: "off", spellcheck: "false", ...attrs });
}

export function select(id: string, options: [value: string, label: string][], value = ""): HTMLSelectElement {
  const s = h("select", { id, name: id });
  for (const [v, l] of options) s.append(h("option", { value: v, selected: v === value }, l));
  return s;
}

export function button(label: string, run: (b: HTMLButtonElement) => void, attrs: Record<string, string | boolean | undefined> = {}): HTMLButtonElement {
  const b = h("button", { type: "button", ...attrs }, label);
  b.addEventListener("click", () => run(b));
  return b;
}

/**
 * A table in a box that scrolls sideways on its own when it is wider than the
 * screen (the page itself never does). `head` are the column titles; columns
 * whose title starts with "?" are hidden on phones (class `opt`).
 */
export function table(caption: string, head: string[], rows: Child[][]): HTMLDivElement {
  const t = h("table");
  t.append(h("caption", { class: "sr" }, caption));
  const opt = head.map((c) => c.startsWith("?"));
  const tr = h("tr");
  head.forEach((c, i) => tr.append(h("th", { scope: "col", class: opt[i] ? "opt" : undefined }, c.replace(/^\?/, ""))));
  t.append(h("thead", {}, tr));
  const body = h("tbody");
  for (const r of rows) {
    const row = h("tr");
    r.forEach((c, i) => row.append(h("td", { class: opt[i] ? "opt" : undefined }, c)));
    body.append(row);
  }
  t.append(body);
  return h("div", { class: "scroll", role: "region", "aria-label": caption, tabindex: "0" }, t);
}

/** An id shortened for a table cell, the whole id on hover. */
export function shortId(id: string, n = 12): HTMLSpanElement {
  return h("span", { class: "id", title: id }, id.length > n ? `${id.slice(0, n - 2)}…` : id);
}

/** "2024-05-01 12:00" in the browser's time zone; "—" for no time. */
export function when(ts: Timestamp | undefined): string {
  if (!ts || (ts.seconds === 0n && ts.nanos === 0)) return "—";
  const d = new Date(timestampMs(ts));
  const p = (n: number): string => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}`;
}

/** 1.2 MB, 340 KB, 12 B. */
export function bytes(n: bigint | number): string {
  const v = Number(n);
  if (v >= 1e6) return `${(v / 1e6).toFixed(1)} MB`;
  if (v >= 1e3) return `${Math.round(v / 1e3)} KB`;
  return `${v} B`;
}

/** A map of counts as "gold 12, gems 3"; "—" when empty. */
export function counts(m: Record<string, bigint | number>): string {
  const e = Object.entries(m).filter(([, v]) => Number(v) !== 0);
  return e.length ? e.sort(([a], [b]) => a.localeCompare(b)).map(([k, v]) => `${k} ${v}`).join(", ") : "—";
}

export interface Said {
  /** What to show. */
  text: string;
  /** "code: message", shown on hover. */
  raw?: string;
  /** The error's code as the Connect protocol spells it ("invalid_argument"). */
  code?: string;
}

/**
 * Puts a message in a note element: `kind` "error" also makes it an alert for
 * screen readers; the raw error goes on hover (title) and in data-code.
 */
export function say(note: HTMLElement, s: Said | string, kind: "ok" | "error" | "" = ""): void {
  const m = typeof s === "string" ? { text: s } : s;
  note.textContent = m.text;
  note.className = `note ${kind}`.trim();
  note.setAttribute("role", kind === "error" ? "alert" : "status");
  if (m.raw) note.title = m.raw;
  else note.removeAttribute("title");
  if (m.code) note.dataset["code"] = m.code;
  else delete note.dataset["code"];
}

/** A secret shown once: the value, a Copy button, and the warning. */
export function secretBox(label: string, secret: string): HTMLDivElement {
  const value = h("code", { class: "secret-value" }, secret);
  const copy = button("Copy", (b) => {
    void navigator.clipboard?.writeText(secret).then(
      () => (b.textContent = "Copied"),
      () => (b.textContent = "Select and copy it"),
    );
  }, { class: "small", "aria-label": `copy the ${label}` });
  return h("div", { class: "secret", role: "status" },
    h("strong", {}, `${label}: `), value, " ", copy,
    h("p", { class: "note" }, "Shown only this once: store it now. Ludus keeps only a hash of it."));
}
