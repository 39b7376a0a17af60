// Builds the browser client into dist/: src/main.ts bundled to app.js, the render
// worker src/renderworker.ts bundled on its own to render-worker.js (the page starts
// it with new URL("render-worker.js", import.meta.url)), plus the static page. The output depends only on the sources, so a rebuild of unchanged sources gives
// identical files (dist/ is committed and embedded in the Go binary).
import { build } from "esbuild";
import { copyFile, mkdir, rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

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

for (const file of ["index.html", "404.html", "style.css"]) {
  await copyFile(join(root, "static", file), join(dist, file));
}
