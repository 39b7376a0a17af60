// Runs web/e2e/render.html (served by e2e/browser_render_test.go) in headless
// Chromium and prints what it left in window.renderTest as one line of JSON.
//
//   node e2e/render.mjs http://127.0.0.1:PORT/
//
// Exits 0 with the JSON (which may hold an "error" the caller reports), or 1 when
// the page could not be run. Bounded by a 120 s timeout. $CHROMIUM overrides
// /usr/bin/chromium.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { launchChromium } from "./chromium.mjs";

const TOTAL_MS = 120_000;
const [url] = process.argv.slice(2);
if (!url) {
  console.error("usage: node e2e/render.mjs URL");
  process.exit(2);
}

const userDataDir = mkdtempSync(join(tmpdir(), "ludus-render-"));
const pageErrors = [];
let context;

async function cleanup() {
  try {
    await Promise.race([context?.close(), new Promise((r) => setTimeout(r, 5000))]);
  } catch {
    // the browser may already be gone
  }
  rmSync(userDataDir, { recursive: true, force: true });
}

const deadline = setTimeout(async () => {
  console.error(`render check timed out after ${TOTAL_MS / 1000} s (page errors: ${pageErrors.join(" | ")})`);
  await cleanup();
  process.exit(1);
}, TOTAL_MS);

try {
  context = await launchChromium(userDataDir);
  const page = context.pages()[0] ?? (await context.newPage());
  page.on("pageerror", (err) => pageErrors.push(err.message));
  page.on("console", (msg) => {
    if (msg.type() === "error") pageErrors.push(`console: ${msg.text()}`);
  });
  const res = await page.goto(url, { waitUntil: "load", timeout: 15_000 });
  if (!res?.ok()) throw new Error(`GET ${url}: HTTP ${res?.status()}`);
  await page.waitForFunction(() => window.renderTest?.done === true, null, { timeout: TOTAL_MS - 10_000, polling: 100 });
  const out = await page.evaluate(() =>
    JSON.stringify(window.renderTest, (_k, v) => (typeof v === "bigint" ? v.toString() : v)),
  );
  clearTimeout(deadline);
  console.log(out);
  if (pageErrors.length) console.error(`page errors: ${pageErrors.join(" | ")}`);
  await cleanup();
  process.exit(0);
} catch (err) {
  clearTimeout(deadline);
  console.error(`render check failed: ${err instanceof Error ? err.message.split("\n")[0] : String(err)} (page errors: ${pageErrors.join(" | ")})`);
  await cleanup();
  process.exit(1);
}
