// A minimal, deterministic wasi_snapshot_preview1 for game modules rendering
// snapshots in the browser (docs/ABI.md, "Imports"): exactly the functions a
// Ludus module may import, none of which reach anything outside the module.
//
// Like the sim node's host (simnode/engine) with no tick advanced: clocks read a
// fixed 1 s, never 0 (Go's runtime aborts on a zero nanotime) and never the real
// time; random_get is the same splitmix64 stream, seeded with "LUDUS_IN", that a
// node's instance reads while _initialize runs; no arguments, no environment, no
// preopened directories; stdin is empty and stdout/stderr are kept (the tail) for
// error messages. So a module's render cannot differ between the browser and the
// node because of its host.

/** The imports docs/ABI.md allows (simnode/engine/shape.go: allowedImports). */
export const ALLOWED_IMPORTS: readonly string[] = [
  "args_get",
  "args_sizes_get",
  "environ_get",
  "environ_sizes_get",
  "clock_res_get",
  "clock_time_get",
  "random_get",
  "fd_write",
  "fd_read",
  "fd_close",
  "fd_fdstat_get",
  "fd_fdstat_set_flags",
  "fd_prestat_get",
  "fd_prestat_dir_name",
  "fd_seek",
  "proc_exit",
  "sched_yield",
  "poll_oneoff",
];

export const WASI_MODULE = "wasi_snapshot_preview1";

const ESUCCESS = 0;
const EBADF = 8;
const EINVAL = 28;
const ESPIPE = 70;

/** What every clock reads: 1 s (simnode/engine clockBase + tick 0 × period). */
export const FIXED_CLOCK_NS = 1_000_000_000n;
/** simnode/engine warmSeed: the random stream of an instance's _initialize. */
const WARM_SEED = 0x4c554455535f494en;
const GOLDEN = 0x9e3779b97f4a7c15n;
const M64 = 0xffffffffffffffffn;

/** proc_exit: the module stopped itself; thrown through the call into it. */
export class ProcExit extends Error {
  constructor(readonly code: number) {
    super(`the module exited with code ${code} (proc_exit)`);
    this.name = "ProcExit";
  }
}

/** How much of the module's stdout/stderr is kept. */
const OUTPUT_KEEP = 4096;

export class Wasi {
  private memory: WebAssembly.Memory | null = null;
  private rand = WARM_SEED ^ GOLDEN;
  private out = "";
  private readonly text = new TextDecoder("utf-8", { fatal: false });

  /** The import object for WebAssembly.instantiate. */
  readonly imports: WebAssembly.Imports;

  constructor() {
    const fns: Record<string, (...args: never[]) => number | void> = {
      args_get: () => ESUCCESS,
      args_sizes_get: (countPtr: number, sizePtr: number) => this.zeros(countPtr, sizePtr),
      environ_get: () => ESUCCESS,
      environ_sizes_get: (countPtr: number, sizePtr: number) => this.zeros(countPtr, sizePtr),
      clock_res_get: (_id: number, resPtr: number) => {
        this.view().setBigUint64(resPtr, 1n, true);
        return ESUCCESS;
      },
      clock_time_get: (_id: number, _precision: bigint, timePtr: number) => {
        this.view().setBigUint64(timePtr, FIXED_CLOCK_NS, true);
        return ESUCCESS;
      },
      random_get: (ptr: number, len: number) => {
        this.random(ptr, len);
        return ESUCCESS;
      },
      fd_write: (fd: number, iovs: number, iovsLen: number, nPtr: number) => {
        if (fd !== 1 && fd !== 2) return EBADF;
        const dv = this.view();
        const mem = this.bytes();
        let n = 0;
        for (let i = 0; i < iovsLen; i++) {
          const p = dv.getUint32(iovs + 8 * i, true);
          const l = dv.getUint32(iovs + 8 * i + 4, true);
          this.keep(mem.subarray(p, p + l));
          n += l;
        }
        dv.setUint32(nPtr, n, true);
        return ESUCCESS;
      },
      fd_read: (fd: number, _iovs: number, _iovsLen: number, nPtr: number) => {
        if (fd !== 0) return EBADF;
        this.view().setUint32(nPtr, 0, true); // stdin is empty
        return ESUCCESS;
      },
      fd_close: (fd: number) => (fd <= 2 ? ESUCCESS : EBADF),
      fd_fdstat_get: (fd: number, ptr: number) => {
        if (fd > 2) return EBADF;
        const dv = this.view();
        dv.setUint8(ptr, 2); // character device
        dv.setUint8(ptr + 1, 0);
        dv.setUint16(ptr + 2, 0, true); // no flags
        dv.setUint32(ptr + 4, 0, true);
        dv.setBigUint64(ptr + 8, fd === 0 ? 2n : 64n, true); // fd_read or fd_write
        dv.setBigUint64(ptr + 16, 0n, true);
        return ESUCCESS;
      },
      fd_fdstat_set_flags: (fd: number) => (fd <= 2 ? ESUCCESS : EBADF),
      fd_prestat_get: () => EBADF, // no preopened directories
      fd_prestat_dir_name: () => EBADF,
      fd_seek: (fd: number) => (fd <= 2 ? ESPIPE : EBADF),
      proc_exit: (code: number) => {
        throw new ProcExit(code);
      },
      sched_yield: () => ESUCCESS,
      poll_oneoff: (inPtr: number, outPtr: number, nsubs: number, nPtr: number) => this.poll(inPtr, outPtr, nsubs, nPtr),
    };
    this.imports = { [WASI_MODULE]: fns as unknown as WebAssembly.ModuleImports };
  }

  /** Must be called once the instance exists, before any call into it. */
  setMemory(memory: WebAssembly.Memory): void {
    this.memory = memory;
  }

  /** The tail of what the module wrote to stdout and stderr. */
  output(): string {
    return this.out;
  }

  // Views are made per call: memory.grow detaches the old buffer.
  private view(): DataView {
    if (!this.memory) throw new Error("wasi: called before the module's memory is known");
    return new DataView(this.memory.buffer);
  }

  private bytes(): Uint8Array {
    if (!this.memory) throw new Error("wasi: called before the module's memory is known");
    return new Uint8Array(this.memory.buffer);
  }

  private zeros(a: number, b: number): number {
    const dv = this.view();
    dv.setUint32(a, 0, true);
    dv.setUint32(b, 0, true);
    return ESUCCESS;
  }

  private keep(b: Uint8Array): void {
    this.out += this.text.decode(b, { stream: true });
    if (this.out.length > OUTPUT_KEEP) this.out = this.out.slice(-OUTPUT_KEEP);
  }

  /** simnode/engine seededStream.Read: 8 bytes of splitmix64 (| 1) per step. */
  private random(ptr: number, len: number): void {
    const mem = this.bytes();
    for (let n = 0; n < len; n += 8) {
      this.rand = (this.rand + GOLDEN) & M64;
      let z = this.rand;
      z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & M64;
      z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M64;
      z = (z ^ (z >> 31n)) | 1n;
      for (let i = 0; i < 8 && n + i < len; i++) {
        mem[ptr + n + i] = Number((z >> BigInt(8 * i)) & 0xffn);
      }
    }
  }

  /**
   * poll_oneoff: every subscription is ready at once. Clocks never advance, so a
   * clock subscription (a sleep) is due immediately, and stdio never blocks.
   */
  private poll(inPtr: number, outPtr: number, nsubs: number, nPtr: number): number {
    if (nsubs === 0) return EINVAL;
    const dv = this.view();
    for (let i = 0; i < nsubs; i++) {
      const s = inPtr + 48 * i;
      const e = outPtr + 32 * i;
      const tag = dv.getUint8(s + 8);
      let err = ESUCCESS;
      if (tag === 1 || tag === 2) {
        const fd = dv.getUint32(s + 16, true);
        if (fd > 2) err = EBADF;
      } else if (tag !== 0) {
        err = EINVAL;
      }
      dv.setBigUint64(e, dv.getBigUint64(s, true), true); // userdata
      dv.setUint16(e + 8, err, true);
      dv.setUint8(e + 10, tag);
      for (let k = 11; k < 32; k++) dv.setUint8(e + k, 0);
    }
    dv.setUint32(nPtr, nsubs, true);
    return ESUCCESS;
  }
}
