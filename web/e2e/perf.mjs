// Measures what drawing a frame costs the play page, driven by
// ../../e2e/browser_perf_test.go:
//
//   node e2e/perf.mjs BASE_URL pixels|snapshots|pixels-main [FRAMES] [CPU_SLOWDOWN]
//
// Creates a game with three bots (so the picture changes every frame) in the forced
// delivery mode, holds a turn key so the player's own view changes too, and waits
// until the page has drawn FRAMES frames (default 150) since the mode settled. Then
// reads the page's frame costs (window.ludus.frameCosts, web/src/hooks.ts: decode,
// worker, draw, decode + worker + draw, and the main thread's share, median and
// 95th percentile) and the status bar's "frame cost" detail, and prints them as one
// line of JSON. Exits 1 when the page reports no costs, or costs that make no sense
// (negative, not finite, a p95 under its median, a total under its parts), or when
// frames are not decoded where they should be: pixels in the render worker,
// pixels-main (?decode=main, as in browsers without workers) and snapshots on the
// page.
//
// CPU_SLOWDOWN (default 1) slows the page's CPU down that many times (Chromium's
// Emulation.setCPUThrottlingRate, as DevTools' "4x slowdown"), for a figure closer
// to a phone's.

import { firstPage, harness } from "./harness.mjs";

const TOTAL_MS = 90_000;

const [base, variant, framesArg = "150", slowArg = "1"] = process.argv.slice(2);
const frames = Number.parseInt(framesArg, 10);
const slowdown = Number.parseFloat(slowArg);
const mode = variant === "snapshots" ? "snapshots" : "pixels";
const decodeOn = variant === "pixels" ? "worker" : "main";
const h = harness({
  name: `perf e2e (${variant})`,
  usage: "node e2e/perf.mjs BASE_URL pixels|snapshots|pixels-main [FRAMES] [CPU_SLOWDOWN]",
  argsOk: Boolean(base && ["pixels", "snapshots", "pixels-main"].includes(variant) && frames > 0 && slowdown >= 1),
  totalMs: TOTAL_MS,
  describe: async () => "",
});
const { check, until } = h;

const hooks = (page) =>
  page.evaluate(() => {
    const h = window.ludus;
    return {
      mode: h.mode, why: h.why, framesDrawn: h.framesDrawn, costs: h.frameCosts, renderMsMedian: h.renderMsMedian,
      decodeOn: h.decodeOn, decodeWhy: h.decodeWhy,
    };
  });

await h.run(async () => {
  const context = await h.persistentContext("ludus-perf-", { viewport: { width: 1280, height: 900 } });
  const page = await firstPage(context);
  h.watch(page);
  if (slowdown > 1) {
    const cdp = await context.newCDPSession(page);
    await cdp.send("Emulation.setCPUThrottlingRate", { rate: slowdown });
  }
  const start = new URL(base);
  start.searchParams.set("delivery", mode);
  start.searchParams.set("bots", "3");
  if (variant === "pixels-main") start.searchParams.set("decode", "main");
  const res = await page.goto(start.href, { waitUntil: "load", timeout: 15_000 });
  check(res?.ok(), `GET ${start.href}: HTTP ${res?.status()}`);
  await page.getByRole("button", { name: "Play as guest" }).click({ timeout: 10_000 });
  const settled = await until(page, 20_000, `never drew in ${mode} mode`, async () => {
    const h = await hooks(page);
    check(!(mode === "snapshots" && h.mode === "pixels" && h.why), `fell back to pixels: ${h.why}`);
    return h.mode === mode && h.framesDrawn > 0 && (mode === "pixels" || h.renderMsMedian !== null) ? h : null;
  });
  check(settled.decodeOn === decodeOn, `frames are decoded on "${settled.decodeOn}", not "${decodeOn}" (${settled.decodeWhy})`);
  await page.keyboard.down("ArrowLeft");
  const measured = await until(page, 60_000, `fewer than ${frames} frames drawn`, async () => {
    const h = await hooks(page);
    return h.framesDrawn - settled.framesDrawn >= frames && h.costs && h.costs.samples >= frames ? h : null;
  });
  await page.keyboard.up("ArrowLeft");
  // The status bar's detail is refreshed once a second, from the same samples.
  const detail = await until(page, 3000, "no frame cost in the status bar's details", () =>
    page.evaluate(() => {
      const t = document.querySelector('[data-field="cost"]')?.textContent ?? "";
      return /^\d+\.\d\d ms, p95 \d+\.\d\d \(decode \d+\.\d\d (on the page|in the worker), worker /.test(t) ? t : null;
    }),
  );

  const c = measured.costs;
  for (const [k, v] of Object.entries(c)) check(Number.isFinite(v) && v >= 0, `${k} is ${v}`);
  for (const s of ["decode", "worker", "draw", "frame", "main"]) {
    check(c[`${s}MsP95`] >= c[`${s}MsP50`], `${s}: p95 ${c[`${s}MsP95`]} under the median ${c[`${s}MsP50`]}`);
  }
  check(c.frameMsP95 >= c.mainMsP95 && c.frameMsP50 >= c.drawMsP50 && c.mainMsP50 >= c.drawMsP50, `totals under their parts: ${JSON.stringify(c)}`);
  check(decodeOn === "worker" || mode === "snapshots" ? c.workerMsP95 > 0 : c.workerMsP95 === 0, `worker time p95 ${c.workerMsP95} (${variant})`);
  // performance.now() ticks in 0.1 ms steps here (no cross-origin isolation), so
  // one stage may read 0; the whole frame at its 95th percentile may not.
  check(c.frameMsP95 > 0, "frames took no time at all: is anything measured?");

  return { variant, mode, decodeOn, slowdown, framesDrawn: measured.framesDrawn, costs: c, detail };
});
