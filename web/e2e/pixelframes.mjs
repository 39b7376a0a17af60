// Reports the pixel frames a spectator page draws, for
// ../../e2e/browser_perf_test.go (TestBrowserPixelFramesExact), which compares
// them with the frames the node sent:
//
//   node e2e/pixelframes.mjs BASE_URL GAME_ID worker|main
//
// Opens the spectator view of GAME_ID with pixels, decoded in the render worker
// (worker) or on the page (main: ?decode=main), checks the page decodes where
// asked, waits for 30 frames, then reads window.ludus.lastFrame() (the SHA-256 of
// the whole indexed8 view last drawn, and its tick) ten times 150 ms apart and
// prints {"ok":true,"decodeOn":...,"frames":[{"tick":"…","sha256":"…"},…]} as one
// line of JSON. Exits 1 on failure.

import { firstPage, harness } from "./harness.mjs";

const TOTAL_MS = 100_000;
const [base, gameId, decode] = process.argv.slice(2);
const h = harness({
  name: `pixel frames (${decode})`,
  usage: "node e2e/pixelframes.mjs BASE_URL GAME_ID worker|main",
  argsOk: Boolean(base && gameId && ["worker", "main"].includes(decode)),
  totalMs: TOTAL_MS,
  elapsed: false,
  ms: false,
});

await h.run(async () => {
  const page = await firstPage(await h.persistentContext("ludus-pixframes-"));
  h.watch(page);
  const url = new URL(base);
  url.searchParams.set("delivery", "pixels");
  if (decode === "main") url.searchParams.set("decode", "main");
  url.hash = `spectate=${encodeURIComponent(gameId)}`;
  const res = await page.goto(url.href, { waitUntil: "load", timeout: 15_000 });
  if (!res?.ok()) throw new Error(`GET ${url.href}: HTTP ${res?.status()}`);
  // A loaded machine (the whole suite, other sessions) can be slow to start a
  // spectator stream; say what the page shows if it never gets there.
  await page.waitForFunction(() => window.ludus?.mode === "pixels" && window.ludus.framesDrawn >= 30, null, { timeout: 60_000, polling: 100 })
    .catch(async (err) => {
      const seen = await page.evaluate(() => ({ mode: window.ludus?.mode, frames: window.ludus?.framesDrawn, decodeOn: window.ludus?.decodeOn,
        status: document.querySelector("#status")?.textContent ?? "" })).catch(() => ({}));
      throw new Error(`${err.message}; page: ${JSON.stringify(seen)}`);
    });
  const on = await page.evaluate(() => [window.ludus.decodeOn, window.ludus.decodeWhy]);
  if (on[0] !== decode) throw new Error(`frames are decoded on "${on[0]}" (${on[1]}), not "${decode}"`);
  const frames = [];
  for (let i = 0; i < 10; i++) {
    const f = await page.evaluate(() => window.ludus.lastFrame());
    if (!f || f.mode !== "pixels") throw new Error(`lastFrame: ${JSON.stringify(f)}`);
    frames.push({ tick: f.tick, sha256: f.sha256 });
    await page.waitForTimeout(150);
  }
  return { decodeOn: on[0], frames };
});
