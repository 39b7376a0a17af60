// Decodes testdata/vectors.json with the TypeScript decoder (web/src/codec.ts,
// bundled by esbuild); run by TestTypeScriptDecoder:
//   node testdata/vectors.mjs BUNDLE.mjs testdata/vectors.json
import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { pathToFileURL } from "node:url";

const [bundle, path] = process.argv.slice(2);
const { FrameDecoder, CodecError, parseHeader } = await import(pathToFileURL(bundle).href);
const v = JSON.parse(await readFile(path, "utf8"));
const b64 = (s) => new Uint8Array(Buffer.from(s, "base64"));
const fail = (msg) => {
  console.error(msg);
  process.exit(1);
};

let frames = 0;
let sequences = 0;
for (const s of v.sequences) {
  if (s.compression === "zstd") continue; // native clients only
  sequences++;
  const dec = new FrameDecoder();
  for (const [i, f] of s.frames.entries()) {
    const p = b64(f.payload);
    const h = parseHeader(p);
    if (h.keyframe !== f.keyframe || h.rawSize !== f.raw_size) fail(`${s.name} frame ${i}: header ${JSON.stringify(h)}`);
    let out;
    try {
      out = await dec.decode(p);
    } catch (err) {
      fail(`${s.name} frame ${i}: ${err}`);
    }
    const sum = createHash("sha256").update(out).digest("hex");
    if (sum !== f.sha256) fail(`${s.name} frame ${i}: decoded frame has another SHA-256`);
    if (f.hex && Buffer.from(out).toString("hex") !== f.hex) fail(`${s.name} frame ${i}: got ${Buffer.from(out).toString("hex")}`);
    frames++;
  }
}

let invalid = 0;
for (const c of v.invalid) {
  const dec = new FrameDecoder();
  for (const pre of c.prefix ?? []) await dec.decode(b64(pre));
  try {
    await dec.decode(b64(c.payload));
  } catch (err) {
    if (!(err instanceof CodecError)) fail(`${c.name}: not a CodecError: ${err}`);
    if (err.kind !== c.error) fail(`${c.name}: ${err.kind} (${err.message}), want ${c.error}`);
    invalid++;
    continue;
  }
  fail(`${c.name}: decoded`);
}
console.log(`ok: ${frames} frames in ${sequences} sequences, ${invalid} invalid payloads refused`);
