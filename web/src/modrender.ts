// A game module's renderer (docs/ABI.md, ludus_render), run in the render worker:
// checks and instantiates the module with the deterministic WASI shim, calls
// _initialize once (never ludus_init: it renders, it does not simulate), then
// turns each snapshot into an indexed8 frame.

import { indexed8Size } from "./indexed8";
import { ALLOWED_IMPORTS, ProcExit, Wasi, WASI_MODULE } from "./wasi";

/** A module whose memory grows past this is stopped (the node's default cap is 32 MiB). */
export const MAX_MEMORY_BYTES = 256 << 20;

/** Why a compiled module cannot render here, or "" when it can. */
export function checkRenderModule(mod: WebAssembly.Module): string {
  const problems: string[] = [];
  for (const imp of WebAssembly.Module.imports(mod)) {
    if (imp.module !== WASI_MODULE || imp.kind !== "function" || !ALLOWED_IMPORTS.includes(imp.name)) {
      problems.push(`imports ${imp.module}.${imp.name} (${imp.kind}), which is not allowed`);
    }
  }
  const exports = new Map(WebAssembly.Module.exports(mod).map((e) => [e.name, e.kind]));
  for (const [name, kind] of [
    ["memory", "memory"],
    ["ludus_buffer", "function"],
    ["ludus_render", "function"],
  ] as const) {
    if (exports.get(name) !== kind) problems.push(`does not export ${kind} ${name}`);
  }
  if (exports.has("_initialize") && exports.get("_initialize") !== "function") problems.push("exports a _initialize that is not a function");
  return problems.join("; ");
}

/** Thrown for anything a module did wrong; the message is for the status bar. */
export class RenderError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RenderError";
  }
}

export class ModuleRenderer {
  private constructor(
    private readonly wasi: Wasi,
    private readonly memory: WebAssembly.Memory,
    private readonly buffer: (size: number) => number,
    private readonly renderFn: (len: number) => bigint,
  ) {}

  /** Instantiates a checked module and runs its _initialize. */
  static async create(mod: WebAssembly.Module): Promise<ModuleRenderer> {
    const problem = checkRenderModule(mod);
    if (problem) throw new RenderError(`the module cannot render here: it ${problem}`);
    const wasi = new Wasi();
    const inst = await WebAssembly.instantiate(mod, wasi.imports);
    const ex = inst.exports;
    const memory = ex["memory"] as WebAssembly.Memory;
    wasi.setMemory(memory);
    const r = new ModuleRenderer(
      wasi,
      memory,
      ex["ludus_buffer"] as (size: number) => number,
      ex["ludus_render"] as (len: number) => bigint,
    );
    const init = ex["_initialize"] as (() => void) | undefined;
    if (init) r.guard("_initialize", init);
    return r;
  }

  /** What the module wrote to stdout/stderr (the tail). */
  output(): string {
    return this.wasi.output();
  }

  /**
   * Renders one snapshot. The frame is a checked indexed8 view that aliases the
   * module's memory until the next call into the module: copy it to keep it.
   */
  render(snapshot: Uint8Array): Uint8Array {
    const len = snapshot.length;
    const p = this.guard("ludus_buffer", () => this.buffer(len)) >>> 0;
    if (p === 0 && len > 0) throw new RenderError(`ludus_buffer(${len}) returned no buffer`);
    let mem = new Uint8Array(this.memory.buffer);
    if (p + len > mem.length) throw new RenderError(`ludus_buffer(${len}) returned ${p}, outside memory of ${mem.length} bytes`);
    mem.set(snapshot, p);
    const r = this.guard("ludus_render", () => this.renderFn(len));
    const ptr = Number(BigInt.asUintN(64, r) >> 32n);
    const n = Number(r & 0xffffffffn);
    mem = new Uint8Array(this.memory.buffer); // re-read: memory may have grown
    if (mem.length > MAX_MEMORY_BYTES) throw new RenderError(`the module's memory grew to ${mem.length >> 20} MiB`);
    if (ptr + n > mem.length) throw new RenderError(`ludus_render returned [${ptr}, +${n}), outside memory of ${mem.length} bytes`);
    const frame = mem.subarray(ptr, ptr + n);
    const size = indexed8Size(frame);
    if (typeof size === "string") throw new RenderError(`ludus_render: ${size}`);
    if (frame.length !== 8 + 768 + size.w * size.h) {
      throw new RenderError(`ludus_render: indexed8 view of ${size.w}×${size.h} has ${frame.length} bytes`);
    }
    return frame;
  }

  /** Runs a call into the module, turning traps and exits into RenderErrors. */
  private guard<T>(what: string, fn: () => T): T {
    try {
      return fn();
    } catch (err) {
      const why = err instanceof ProcExit ? err.message : err instanceof Error ? `${err.name}: ${err.message}` : String(err);
      const out = lastWords(this.wasi.output());
      throw new RenderError(`${what} failed: ${why}${out ? ` (the module said: ${out})` : ""}`);
    }
  }
}

/** The line of a module's output that explains a failure (a Go panic's), or its last line. */
function lastWords(out: string): string {
  const m = /(?:^|\n)((?:panic|fatal error): [^\n]*)/.exec(out);
  const line = m ? m[1]! : (out.trim().split("\n").pop() ?? "");
  return line.length > 200 ? `${line.slice(0, 200)}…` : line;
}
