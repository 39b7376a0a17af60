// Browser check of mouse look (pointer lock) on the play page, driven by
// ../../e2e/browser_mouselook_test.go, which watches the player's heading on the
// server (the game's spectator snapshots) while this script moves the mouse:
//
//   node e2e/mouselook.mjs BASE_URL ARTIFACTS_DIR pixels|snapshots
//
// Creates a game without bots in the forced delivery mode, checks the hint line
// offers mouse look, then talks with the driver line by line:
//
//   prints "GAME <id> <slot>"        waits for "ready" (the driver knows the heading)
//   clicks the view: the pointer locks (headless Chromium grants it), the hint
//   says so, the payload grows the aim and lock; moves the mouse PX px right
//   prints "AIM <total>"             waits for "turned" (the heading moved by it)
//   holds the mouse button: the fire bit is set; releases it
//   exits pointer lock (what the browser does on Esc: a synthetic Escape key
//   does not reach the browser's own handler), moves the mouse again
//   prints "RELEASED"                waits for "ok" (the heading did not move)
//
// Prints a one-line JSON summary and exits 0, or prints the failure and exits 1.
// The screenshot of the locked view is ARTIFACTS_DIR/browser-mouselook-MODE.png.

import { join } from "node:path";
import { createInterface } from "node:readline";
import { firstPage, harness } from "./harness.mjs";

const TOTAL_MS = 90_000;
const FRAME_MS = 20_000;
/** Pixels moved right while locked; the page counts 16 aim units a pixel (input.ts AIM_PER_PX). */
const PX = 200;
const AIM_PER_PX = 16;

const [base, artifacts, mode] = process.argv.slice(2);
const h = harness({
  name: `mouse look e2e (${mode})`,
  usage: "node e2e/mouselook.mjs BASE_URL ARTIFACTS_DIR pixels|snapshots",
  argsOk: Boolean(base && artifacts && ["pixels", "snapshots"].includes(mode)),
  totalMs: TOTAL_MS,
  poll: 50,
  describe: async (page) => {
    const state = await page.evaluate(() => ({
      mouse: window.ludus?.mouse, aim: window.ludus?.aim, payload: window.ludus?.inputPayload,
      message: document.querySelector("#status .message")?.textContent ?? "",
    })).catch(() => ({}));
    return `; page: ${JSON.stringify(state)}`;
  },
});
const { check, until } = h;

const lines = createInterface({ input: process.stdin });
const queue = [];
const waiting = [];
lines.on("line", (l) => (waiting.length ? waiting.shift()(l.trim()) : queue.push(l.trim())));

/** Prints a request to the driver and waits for its answer, which must be `want`. */
async function ask(line, want) {
  console.log(line);
  const got = queue.length ? queue.shift() : await new Promise((r) => waiting.push(r));
  check(got === want, `after "${line}" the driver said "${got}"`);
}

function hooks(page) {
  return page.evaluate(() => {
    const h = window.ludus;
    return {
      mode: h.mode, why: h.why, framesDrawn: h.framesDrawn, mouse: h.mouse, aim: h.aim,
      payload: h.inputPayload, mask: h.inputMask,
      hint: document.getElementById("mouse-hint")?.hidden ? "" : document.getElementById("mouse-hint")?.textContent ?? "",
      locked: document.pointerLockElement?.id ?? "",
      details: document.querySelector('[data-field="mouse"]')?.textContent ?? "",
      keys: document.getElementById("keys")?.textContent ?? "",
    };
  });
}

await h.run(async () => {
  const page = await firstPage(await h.persistentContext("ludus-mouse-", { viewport: { width: 1280, height: 900 } }));
  h.watch(page);
  const start = new URL(base);
  start.searchParams.set("delivery", mode);
  start.searchParams.set("bots", "0"); // nobody shoots the player: its heading is the mouse's alone
  const res = await page.goto(start.href, { waitUntil: "load", timeout: 15_000 });
  check(res?.ok(), `GET ${start.href}: HTTP ${res?.status()}`);
  await page.getByRole("button", { name: "Play as guest" }).click({ timeout: 10_000 });

  const ready = await until(page, FRAME_MS, `no ${mode} frame drawn`, async () => {
    const h = await hooks(page);
    check(!(mode === "snapshots" && h.mode === "pixels" && h.why), `fell back to pixels: ${h.why}`);
    return h.mode === mode && h.framesDrawn > 0 && h.mouse === "ready" ? h : null;
  });
  check(/Click the view for mouse look/.test(ready.hint), `the hint line does not offer mouse look: "${ready.hint}"`);
  check(ready.keys.includes("fire: Space/Mouse"), `key hints: ${ready.keys}`);
  const gameId = await page.evaluate(() => new URLSearchParams(location.hash.slice(1)).get("game"));
  const slot = await until(page, 5000, "no slot in the details", () =>
    page.evaluate(() => {
      const t = document.querySelector('[data-field="slot"]')?.textContent ?? "";
      return /^\d+$/.test(t) ? t : null;
    }),
  );
  await ask(`GAME ${gameId} ${slot}`, "ready");

  // Lock: a click with the mouse on the view.
  const box = await page.locator("#view").boundingBox();
  check(box, "no view on the page");
  const cx = box.x + box.width / 2;
  const cy = box.y + box.height / 2;
  await page.mouse.move(cx, cy);
  await page.mouse.click(cx, cy);
  const locked = await until(page, 5000, "the pointer did not lock on the view", async () => {
    const h = await hooks(page);
    return h.mouse === "locked" && h.locked === "view" && h.payload.length === 7 ? h : null;
  });
  check(/Mouse look on/.test(locked.hint), `the hint line while locked: "${locked.hint}"`);
  check(locked.aim === 0 && locked.payload[0] === 0, `a new lock starts at aim 0 with no buttons: ${JSON.stringify(locked.payload)}`);
  check(/^locked, aim 0 \(lock \d+\)$/.test(locked.details), `details: "${locked.details}"`);
  const lock = locked.payload[5] | (locked.payload[6] << 8);
  check(lock !== 0, "lock id 0");
  await page.waitForTimeout(300); // the lock's first input (its reference) reaches the game

  // Turn: PX pixels right, in steps as a hand would.
  await page.mouse.move(cx + PX, cy, { steps: 20 });
  const want = PX * AIM_PER_PX;
  const aimed = await until(page, 3000, `the aim never reached ${want}`, async () => {
    const h = await hooks(page);
    return h.aim === want ? h : null;
  });
  const sent = new DataView(new Uint8Array(aimed.payload).buffer);
  check(sent.getInt32(1, true) === want && sent.getUint16(5, true) === lock, `payload ${JSON.stringify(aimed.payload)}`);
  check(aimed.details === `locked, aim ${want} (lock ${lock})`, `details: "${aimed.details}"`);
  await page.screenshot({ path: join(artifacts, `browser-mouselook-${mode}.png`) });
  await ask(`AIM ${want}`, "turned");

  // Fire with the mouse button.
  await page.mouse.down();
  const firing = await until(page, 2000, "the mouse button did not set the fire bit", async () => {
    const h = await hooks(page);
    return h.payload[0] & 0x40 ? h : null;
  });
  await page.mouse.up();
  await until(page, 2000, "releasing the mouse button did not clear the fire bit", async () => {
    const h = await hooks(page);
    return h.payload.length === 7 && (h.payload[0] & 0x40) === 0 ? h : null;
  });

  // Release (Esc): back to key-only payloads; moving the mouse does nothing.
  await page.evaluate(() => document.exitPointerLock());
  const released = await until(page, 3000, "the page did not notice the pointer was released", async () => {
    const h = await hooks(page);
    return h.mouse === "ready" && h.payload.length === 1 ? h : null;
  });
  check(/Click the view for mouse look/.test(released.hint), `the hint line after release: "${released.hint}"`);
  await page.mouse.move(cx - PX, cy, { steps: 10 });
  await page.waitForTimeout(200);
  check((await hooks(page)).payload.length === 1, "the mouse moved the aim after release");
  await ask("RELEASED", "ok");

  lines.close();
  return { mode, gameId, slot, lock, aim: want, firingPayload: firing.payload };
});
