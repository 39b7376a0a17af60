// A studio's first hour, seen by two players: a module made with `ludus new`
// (built, uploaded and its game created by the Go driver, e2e/firsthour_test.go)
// played in Chromium from an invite link, one browser context per player.
//
//   node e2e/firsthour.mjs BASE_URL ARTIFACTS_DIR GAME_ID TITLE
//
// Checks, for both players: the page takes the module's title, hint and key hints
// from its metadata, the screen keeps the module's square aspect (128×128, whole
// multiples), the module's own keys move the player, and when the match ends the
// page shows its result (who won, the scores) in words. Prints a JSON summary and
// exits 0, or prints the failure and exits 1. Screenshot: ARTIFACTS_DIR/first-hour.png.

import { join } from "node:path";
import { firstPage, harness } from "./harness.mjs";

const TOTAL_MS = 90_000;
const [base, artifacts, gameId, title] = process.argv.slice(2);
const h = harness({
  name: "first-hour e2e",
  usage: "node e2e/firsthour.mjs BASE_URL ARTIFACTS_DIR GAME_ID TITLE",
  argsOk: Boolean(base && artifacts && gameId && title),
  totalMs: TOTAL_MS,
  firstLine: false,
  ms: false,
  consoleErrors: false,
  describe: async (page) => {
    const msg = await page.evaluate(() => document.querySelector("#status .message")?.textContent ?? "").catch(() => "");
    return `; status: ${msg}`;
  },
});
const { check, until } = h;

/** A hash of the canvas, and whether it shows more than one colour. */
function canvasState() {
  const c = document.getElementById("view");
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  let h = 0x811c9dc5;
  let uniform = true;
  for (let i = 0; i < d.length; i += 4) {
    const v = d[i] | (d[i + 1] << 8) | (d[i + 2] << 16);
    if (i > 0 && v !== (d[0] | (d[1] << 8) | (d[2] << 16))) uniform = false;
    h = Math.imul(h ^ v, 16777619) >>> 0;
  }
  return { drawn: !uniform, hash: h, frames: window.ludus?.framesDrawn ?? 0 };
}

async function player(n) {
  const context = await h.persistentContext("ludus-firsthour-", { viewport: { width: 900, height: 800 } });
  const page = await firstPage(context);
  h.watch(page, `player ${n}`);
  const u = new URL(base);
  u.hash = `game=${gameId}`;
  await page.goto(u.href, { waitUntil: "load", timeout: 15_000 });
  await page.fill("#name", `player${n}`);
  await page.getByRole("button", { name: "Play as guest" }).click({ timeout: 10_000 });
  await until(page, 20_000, `player ${n}: no frame drawn`, async () => {
    const s = await page.evaluate(canvasState);
    return s.drawn && s.frames > 0;
  });
  return page;
}

await h.run(async () => {
  const pages = [await player(1), await player(2)];
  for (const [i, page] of pages.entries()) {
    await until(page, 5000, `player ${i + 1}: the module's metadata never reached the page`, () =>
      page.evaluate(() => window.ludus?.meta?.title ?? ""));
    const shown = await page.evaluate(() => ({
      title: document.getElementById("match-title").textContent ?? "",
      doc: document.title,
      hint: document.getElementById("hint").textContent ?? "",
      keys: document.getElementById("keys").textContent ?? "",
      w: document.getElementById("screen").getBoundingClientRect().width,
      h: document.getElementById("screen").getBoundingClientRect().height,
    }));
    check(shown.title.startsWith(title) && shown.doc.includes(title), `title ${JSON.stringify(shown)}; want ${title}`);
    check(shown.hint.includes("gem"), `hint: ${shown.hint}`);
    check(/up: .*↑/.test(shown.keys) && /right: .*→/.test(shown.keys), `key hints: ${shown.keys}`);
    check(!/arena|fire/i.test(shown.keys + shown.hint + shown.title), `arena text left on the page: ${JSON.stringify(shown)}`);
    check(Math.abs(shown.w - shown.h) < 1 && shown.w % 128 === 0, `screen ${shown.w}x${shown.h} is not a whole multiple of 128x128`);
  }
  // The module's keys move the player: its view changes while an arrow key is
  // held. The player starts on a random cell, so one way may be a wall or the
  // other player (x = 15 is one start in 16): each way is tried in turn, and
  // some way is open from any cell but a corner boxed in by the other player.
  const before = (await pages[0].evaluate(canvasState)).hash;
  let moved = false;
  for (const key of ["ArrowRight", "ArrowLeft", "ArrowDown", "ArrowUp"]) {
    await pages[0].keyboard.down(key);
    const deadline = Date.now() + 2500;
    while (!moved && Date.now() < deadline) {
      moved = (await pages[0].evaluate(canvasState)).hash !== before;
      if (!moved) await pages[0].waitForTimeout(50);
    }
    await pages[0].keyboard.up(key);
    if (moved) break;
  }
  check(moved, "no arrow key moved the player (each held for 2.5 s)");
  // A send that fails for a passing reason (Unavailable: the game moving to
  // another node) is sent again; in an event game as it was, same seq, so no
  // later input waits for a gap and is refused for it (409: Aborted, InputGap).
  const sends = "**/ludus.v1.GameService/SendInput";
  let failed = 0;
  let gaps = 0;
  pages[0].on("response", (r) => {
    if (r.url().endsWith("/ludus.v1.GameService/SendInput") && r.status() === 409) gaps++;
  });
  await pages[0].route(sends, (r) => {
    if (failed > 0) return r.continue();
    failed++;
    return r.fulfill({
      status: 503,
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ code: "unavailable", message: "game is moving to another node" }),
    });
  });
  await pages[0].keyboard.down("ArrowLeft");
  await pages[0].waitForTimeout(300);
  await pages[0].keyboard.up("ArrowLeft");
  await pages[0].keyboard.down("ArrowDown");
  await pages[0].waitForTimeout(300);
  await pages[0].keyboard.up("ArrowDown");
  await pages[0].waitForTimeout(3000); // the retry (1 s) and longer than a game waits for a gap (1 s)
  await pages[0].unroute(sends);
  check(failed === 1, `${failed} sends failed on purpose, want 1`);
  check(gaps === 0, `${gaps} inputs refused for a gap after one failed send: it was not sent again as it was`);
  // The match ends at its time limit; the page says who won and the scores.
  const results = [];
  for (const [i, page] of pages.entries()) {
    const msg = await until(page, 40_000, `player ${i + 1}: the end of the match was never shown`, () =>
      page.evaluate(() => {
        const m = document.querySelector("#status .message")?.textContent ?? "";
        return m.startsWith("Match over") ? m : "";
      }));
    check(/(wins|You win|No winner)/.test(msg) && /Scores: .*you \d+/.test(msg), `player ${i + 1}: result not in words: ${msg}`);
    const overlay = await page.evaluate(() => document.getElementById("overlay").textContent ?? "");
    check(overlay.includes("Match over"), `player ${i + 1}: no result over the screen: ${overlay}`);
    results.push(msg);
  }
  await pages[0].screenshot({ path: join(artifacts, "first-hour.png") });
  check(h.pageErrors.length === 0, `page errors: ${h.pageErrors.join(" | ")}`);
  return { seconds: (Date.now() - h.started) / 1000, results };
});
