// Builds the browser client into dist/: src/main.ts bundled to app.js, the render
// worker src/renderworker.ts bundled on its own to render-worker.js (the page starts
// it with new URL("render-worker.js", import.meta.url)), the studio console
// src/console.ts to console.js (its own bundle: players never download it), plus the
// static pages. The output depends only on the sources, so a rebuild of unchanged
// sources gives identical files (dist/ is committed and embedded in the Go binary).
//
// Each bundle has a gzip size budget (budget.json, also checked by embed_test.go):
// the build prints the sizes and fails when one is over.
import { build } from "esbuild";
import { copyFile, mkdir, readFile, rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

const root = dirname(fileURLToPath(import.meta.url));
// LUDUS_WEB_OUT lets the test script build elsewhere and compare with the committed dist/.
const dist = process.env.LUDUS_WEB_OUT || join(root, "dist");

await rm(dist, { recursive: true, force: true });
await mkdir(dist, { recursive: true });

const common = {
  absWorkingDir: root,
  bundle: true,
  platform: "browser",
  target: "es2022",
  minify: true,
  sourcemap: false,
  legalComments: "none",
  charset: "utf8",
  logLevel: "warning",
};

await build({ ...common, entryPoints: ["src/main.ts"], outfile: join(dist, "app.js"), format: "esm" });
// A classic (not module) worker script: every browser with OffscreenCanvas runs it.
await build({ ...common, entryPoints: ["src/renderworker.ts"], outfile: join(dist, "render-worker.js"), format: "iife" });

await build({ ...common, entryPoints: ["src/console.ts"], outfile: join(dist, "console.js"), format: "esm" });

for (const file of ["index.html", "404.html", "console.html", "style.css"]) {
  await copyFile(join(root, "static", file), join(dist, file));
}

const budget = JSON.parse(await readFile(join(root, "budget.json"), "utf8"));
let over = false;
for (const [file, limit] of Object.entries(budget.gzipBytes)) {
  const raw = await readFile(join(dist, file));
  const gz = gzipSync(raw, { level: 9 }).length;
  const ok = gz <= limit;
  over ||= !ok;
  console.log(`${file.padEnd(18)} ${String(raw.length).padStart(7)} B, gzip ${String(gz).padStart(6)} B of ${limit}${ok ? "" : "  OVER BUDGET"}`);
}
if (over) {
  console.error("a bundle is over its gzip budget (web/budget.json): make it smaller, or raise the budget on purpose");
  process.exit(1);
}
