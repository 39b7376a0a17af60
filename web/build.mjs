// Builds the browser client into dist/: src/main.ts bundled to app.js, plus the static
// page. The output depends only on the sources, so a rebuild of unchanged sources gives
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

await build({
  absWorkingDir: root,
  entryPoints: ["src/main.ts"],
  outfile: join(dist, "app.js"),
  bundle: true,
  format: "esm",
  platform: "browser",
  target: "es2022",
  minify: true,
  sourcemap: false,
  legalComments: "none",
  charset: "utf8",
  logLevel: "warning",
});

for (const file of ["index.html", "style.css"]) {
  await copyFile(join(root, "static", file), join(dist, file));
}
