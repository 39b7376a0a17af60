// A module's metadata as the page uses it (docs/ABI.md, "Metadata for pages"): title,
// player hint, view size and controls. The server sends the module's ludus_meta JSON
// in the first Status of a stream (Status.module_meta); an older server sends none,
// and the page then presents the game as the arena (src/arena-meta.json, which a Go
// test keeps equal to the arena's declared metadata).

import arenaJson from "./arena-meta.json";

/** One button of the module's input: held keys set `bit` of the payload. */
export interface Control {
  /** KeyboardEvent.code names. */
  keys: string[];
  label: string;
  bit: number;
}

export interface ModuleMeta {
  name: string;
  /** What players read: the declared title, else the module name. */
  title: string;
  hint: string;
  /** 0 when not declared. */
  viewWidth: number;
  viewHeight: number;
  inputKind: string;
  controls: Control[];
  /** The module reads a bots count from CreateGame. */
  bots: boolean;
  /** Where it came from: the server, or the arena fallback. */
  source: "server" | "fallback";
}

// Limits of sdk/abi (Meta.Validate); the page drops what exceeds them.
const MAX_TITLE = 64;
const MAX_HINT = 200;
const MAX_CONTROLS = 32;
const MAX_KEYS = 4;
const MAX_LABEL = 24;
const MAX_BIT = 31;
const KEY_NAME = /^[A-Z][A-Za-z0-9]{0,23}$/;

function str(v: unknown, max: number): string {
  return typeof v === "string" ? v.slice(0, max) : "";
}

function dim(v: unknown): number {
  return typeof v === "number" && Number.isInteger(v) && v > 0 && v <= 4096 ? v : 0;
}

function controlsOf(v: unknown): Control[] {
  if (!Array.isArray(v)) return [];
  const out: Control[] = [];
  const seen = new Set<string>();
  for (const c of v.slice(0, MAX_CONTROLS) as unknown[]) {
    if (typeof c !== "object" || c === null) continue;
    const r = c as Record<string, unknown>;
    const bit = r["bit"];
    const label = str(r["label"], MAX_LABEL);
    if (typeof bit !== "number" || !Number.isInteger(bit) || bit < 0 || bit > MAX_BIT || !label) continue;
    const keys: string[] = [];
    if (Array.isArray(r["keys"])) {
      for (const k of (r["keys"] as unknown[]).slice(0, MAX_KEYS)) {
        if (typeof k === "string" && KEY_NAME.test(k) && !seen.has(k)) {
          seen.add(k);
          keys.push(k);
        }
      }
    }
    out.push({ keys, label, bit });
  }
  return out;
}

/** Reads ludus_meta JSON defensively (it is the module's, not the page's); null if not an object. */
export function parseMeta(json: string, source: ModuleMeta["source"] = "server"): ModuleMeta | null {
  let v: unknown;
  try {
    v = JSON.parse(json);
  } catch {
    return null;
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) return null;
  const r = v as Record<string, unknown>;
  const name = str(r["name"], 64);
  return {
    name,
    title: str(r["title"], MAX_TITLE) || name || "Game",
    hint: str(r["hint"], MAX_HINT),
    viewWidth: dim(r["view_width"]),
    viewHeight: dim(r["view_height"]),
    inputKind: str(r["input_kind"], 16),
    controls: controlsOf(r["controls"]),
    bots: r["bots"] === true,
    source,
  };
}

/** The arena's metadata: what the page presents when the server sends none. */
export const FALLBACK_META: ModuleMeta = parseMeta(JSON.stringify(arenaJson), "fallback")!;

/** Payload bytes for the controls: enough for the highest bit (docs/ABI.md). */
export function inputBytes(controls: readonly Control[]): number {
  let n = 0;
  for (const c of controls) n = Math.max(n, (c.bit >> 3) + 1);
  return n;
}

/** The held-bits mask as the module's payload: little-endian, `n` bytes. */
export function payloadOf(mask: number, n: number): Uint8Array {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = (mask >>> (8 * i)) & 0xff;
  return out;
}

const ARROWS: Readonly<Record<string, string>> = { ArrowUp: "↑", ArrowDown: "↓", ArrowLeft: "←", ArrowRight: "→" };

/** How a KeyboardEvent.code reads on a key cap: KeyW → W, ArrowUp → ↑, Digit1 → 1. */
export function keyCap(code: string): string {
  if (ARROWS[code]) return ARROWS[code];
  const m = /^(?:Key|Digit)(.+)$/.exec(code);
  if (m) return m[1]!;
  const n = /^Numpad(.+)$/.exec(code);
  if (n) return `Num ${n[1]}`;
  return code;
}

/** "forward: W/↑ · fire: Space" (controls without keys are touch-only and left out). */
export function keyHints(controls: readonly Control[]): string {
  return controls
    .filter((c) => c.keys.length)
    .map((c) => `${c.label}: ${c.keys.map(keyCap).join("/")}`)
    .join(" · ");
}
