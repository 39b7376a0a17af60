// Runs web/e2e/render.html (served by e2e/browser_render_test.go) in headless
// Chromium and prints what it left in window.renderTest as one line of JSON.
//
//   node e2e/render.mjs http://127.0.0.1:PORT/
//
// Exits 0 with the JSON (which may hold an "error" the caller reports), or 1 when
// the page could not be run. Bounded by a 120 s timeout. $CHROMIUM overrides
// /usr/bin/chromium.

import { firstPage, harness } from "./harness.mjs";

const TOTAL_MS = 120_000;
const [url] = process.argv.slice(2);
const h = harness({
  name: "render check",
  usage: "node e2e/render.mjs URL",
  argsOk: Boolean(url),
  totalMs: TOTAL_MS,
  // Every page error, also when there is none, and the timeout said apart.
  format: ({ message, timedOut, pageErrors }) =>
    timedOut
      ? `render check timed out after ${TOTAL_MS / 1000} s (page errors: ${pageErrors.join(" | ")})`
      : `render check failed: ${message} (page errors: ${pageErrors.join(" | ")})`,
  // The page's own JSON (not {"ok":true,…}); page errors beside it, on stderr.
  print: (out) => {
    console.log(out);
    if (h.pageErrors.length) console.error(`page errors: ${h.pageErrors.join(" | ")}`);
  },
});

await h.run(async () => {
  const page = await firstPage(await h.persistentContext("ludus-render-"));
  h.watch(page);
  const res = await page.goto(url, { waitUntil: "load", timeout: 15_000 });
  if (!res?.ok()) throw new Error(`GET ${url}: HTTP ${res?.status()}`);
  await page.waitForFunction(() => window.renderTest?.done === true, null, { timeout: TOTAL_MS - 10_000, polling: 100 });
  return page.evaluate(() =>
    JSON.stringify(window.renderTest, (_k, v) => (typeof v === "bigint" ? v.toString() : v)),
  );
});
