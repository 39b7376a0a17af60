// Browser end-to-end check of the web client against a running Ludus gateway.
//
//   node e2e/play.mjs http://127.0.0.1:8080 /tmp/play.png [pixels|snapshots]
//
// Opens the page in headless Chromium ($CHROMIUM, default /usr/bin/chromium), clicks
// "Play as guest", waits for a drawn frame, holds the Left arrow for a second and checks
// the view changed and the input was acknowledged, opens the Spectate link in a second
// page and waits for its first frame, then saves a screenshot of the play page. Prints a
// one-line JSON summary and exits 0, or prints the failure and exits 1. Everything is
// bounded by a 60 s timeout.
//
// The third argument forces a delivery mode: the page is opened with ?delivery=MODE
// (kept by the Spectate link) and both pages must draw in that mode, with the status
// bar's mode field saying so ("snapshots (rendered here)" / "pixels (...)"); a page
// that fell back from snapshots to pixels fails the check, naming the reason. Without
// it the page chooses, and the summary says what it chose. The summary reports the
// page's test hooks (window.ludus): mode, frames drawn, the median render time per
// frame and the SHA-256 and tick of the last indexed8 frame drawn.

import { firstPage, harness } from "./harness.mjs";

const TOTAL_MS = 60_000;
const FRAME_MS = 20_000;
const CHANGE_MS = 8_000;

const [base, shot, mode = ""] = process.argv.slice(2);
const h = harness({
  name: "e2e",
  usage: "node e2e/play.mjs BASE_URL SCREENSHOT.png [pixels|snapshots]",
  argsOk: Boolean(base && shot && ["", "pixels", "snapshots"].includes(mode)),
  totalMs: TOTAL_MS,
  describe: async (page) => `; status bar: ${JSON.stringify(await statusText(page).catch(() => ({})))}`,
});
const { until, watch } = h;
/** The page to open: BASE_URL, with ?delivery=MODE when a mode is forced. */
const start = new URL(base);
if (mode) start.searchParams.set("delivery", mode);

/** In the page: whether the canvas shows anything but one colour, and an FNV-1a hash. */
function canvasState() {
  const c = document.getElementById("view");
  if (!(c instanceof HTMLCanvasElement)) return { drawn: false, hash: "", size: "no canvas" };
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  const first = d[0] | (d[1] << 8) | (d[2] << 16);
  let uniform = true;
  let h = 0x811c9dc5;
  for (let i = 0; i < d.length; i += 4) {
    const v = d[i] | (d[i + 1] << 8) | (d[i + 2] << 16);
    if (v !== first) uniform = false;
    h = Math.imul(h ^ v, 16777619) >>> 0;
  }
  return { drawn: !uniform, hash: h.toString(16).padStart(8, "0"), size: `${c.width}x${c.height}` };
}

/** The status bar's fields and message, for reports. */
function statusText(page) {
  return page.evaluate(() => {
    const out = {};
    for (const el of document.querySelectorAll("[data-field]")) out[el.dataset.field] = el.textContent;
    out.message = document.querySelector("#status .message")?.textContent ?? "";
    out.overlay = document.getElementById("overlay")?.hidden === false ? document.getElementById("overlay").textContent : "";
    return out;
  });
}

async function firstFrame(page, label) {
  return until(page, FRAME_MS, `${label}: no frame drawn within ${FRAME_MS / 1000} s`, async () => {
    const s = await page.evaluate(canvasState);
    return s.drawn ? s : null;
  });
}

/** The page's drawing hooks (web/src/hooks.ts), with the hash of the last frame drawn. */
function hooks(page) {
  return page.evaluate(async () => {
    const h = window.ludus;
    if (!h) return null;
    return {
      mode: h.mode,
      why: h.why,
      framesDrawn: h.framesDrawn,
      renderMsMedian: h.renderMsMedian,
      renderSamples: h.renderSamples,
      lastFrame: await h.lastFrame(),
    };
  });
}

/**
 * Waits until the page draws in the forced mode and its status bar says so; fails at
 * once when it fell back to pixels. Without a forced mode, returns the hooks.
 */
async function checkMode(page, label) {
  if (!mode) return hooks(page);
  return until(page, FRAME_MS, `${label}: never drew in ${mode} mode`, async () => {
    const h = await hooks(page);
    if (h && mode === "snapshots" && h.mode === "pixels" && h.why) {
      throw new Error(`${label}: fell back to pixels: ${h.why}`);
    }
    const text = await page.evaluate(() => document.querySelector('[data-field="mode"]')?.textContent ?? "");
    return h && h.mode === mode && text.startsWith(mode) && h.framesDrawn > 0 && h.lastFrame ? { ...h, text } : null;
  });
}

await h.run(async () => {
  const context = await h.persistentContext("ludus-e2e-", { viewport: { width: 1280, height: 900 } });
  const page = await firstPage(context);
  watch(page, "play");

  const res = await page.goto(start.href, { waitUntil: "load", timeout: 15_000 });
  if (!res?.ok()) throw new Error(`GET ${start.href}: HTTP ${res?.status()}`);
  await page.getByRole("button", { name: "Play as guest" }).click({ timeout: 10_000 });

  const first = await firstFrame(page, "play page");
  await checkMode(page, "play page");
  const gameId = await until(page, 5000, "game id never appeared in the URL hash", () =>
    page.evaluate(() => new URLSearchParams(location.hash.slice(1)).get("game")),
  );

  await page.keyboard.down("ArrowLeft");
  await page.waitForTimeout(1000);
  await page.keyboard.up("ArrowLeft");

  const after = await until(page, CHANGE_MS, "the view did not change after holding Left", async () => {
    const s = await page.evaluate(canvasState);
    return s.drawn && s.hash !== first.hash ? s : null;
  });
  const ack = await until(page, CHANGE_MS, "no input was acknowledged", () =>
    page.evaluate(() => {
      const t = document.querySelector('[data-field="ack"]')?.textContent ?? "";
      return t && t !== "—" ? t : null;
    }),
  );

  const spectateUrl = await page.getAttribute("#spectate-link", "href");
  if (!spectateUrl) throw new Error("no Spectate link on the play page");
  const spec = await context.newPage();
  watch(spec, "spectate");
  await spec.goto(spectateUrl, { waitUntil: "load", timeout: 15_000 });
  const specFrame = await firstFrame(spec, "spectate page");
  const specHooks = await checkMode(spec, "spectate page");

  // Let a few more frames through, so the render time is a median of many.
  await page.waitForTimeout(1500);
  const playHooks = await checkMode(page, "play page");
  await page.screenshot({ path: shot });
  const status = await statusText(page);
  return {
    base,
    url: start.href,
    mode: playHooks?.mode ?? "",
    why: playHooks?.why ?? "",
    framesDrawn: playHooks?.framesDrawn ?? 0,
    renderMsMedian: playHooks?.renderMsMedian ?? null,
    renderSamples: playHooks?.renderSamples ?? 0,
    lastFrame: playHooks?.lastFrame ?? null,
    spectateMode: specHooks?.mode ?? "",
    spectateRenderMsMedian: specHooks?.renderMsMedian ?? null,
    gameId,
    canvas: first.size,
    firstHash: first.hash,
    afterLeftHash: after.hash,
    spectateHash: specFrame.hash,
    inputAck: ack,
    status,
    screenshot: shot,
  };
});
