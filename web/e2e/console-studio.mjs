// Browser checks of the studio console's matchmaking, usage, batch and game-log
// sections (/console) against a running Ludus gateway:
//
//   LUDUS_TENANT=slug LUDUS_KEY=lds_… LUDUS_OPERATOR_KEY=… node e2e/console-studio.mjs BASE_URL ARTIFACTS_DIR
//
// The tenant must have the arena module and no matchmaking rules. The flow: sign
// in with both keys; matchmaking rules refused in words (a band cap under the
// band start), then saved, read back after a reload, edited and deleted; a player
// plays in another browser context and the Live games table opens the game's
// logs (the arena writes nothing: "No output yet", following its node, no
// error); quotas read and set with the operator key, the usage chart drawn; a
// batch run of an unknown module refused in words, then a 3-game run started,
// followed to its end (progress bar full, results summed up) with a working
// archive link; the new sections at 360 px without sideways scrolling.
//
// Prints a one-line JSON summary and exits 0, or prints the failure and exits 1.
// Screenshots: ARTIFACTS_DIR/console-{matchmaking,logs,usage,batch}.png.

import { join } from "node:path";
import { consolePages } from "./console-pages.mjs";
import { FAILED_REQUESTS, harness, pageText } from "./harness.mjs";

const TOTAL_MS = 150_000;

const [base, artifacts] = process.argv.slice(2);
const { LUDUS_TENANT: tenant, LUDUS_KEY: tenantKey, LUDUS_OPERATOR_KEY: operatorKey } = process.env;
const h = harness({
  name: "console studio e2e",
  usage: "LUDUS_TENANT= LUDUS_KEY= LUDUS_OPERATOR_KEY= node e2e/console-studio.mjs BASE_URL ARTIFACTS_DIR",
  argsOk: Boolean(base && artifacts && tenant && tenantKey && operatorKey),
  totalMs: TOTAL_MS,
  steps: true,
  // RPCs the flow makes fail on purpose log failed requests.
  ignoreConsole: FAILED_REQUESTS,
  describe: pageText(800),
});
const { check, until, step, watch } = h;
const { text, section, row, sideways } = consolePages(until);
let browser;

const noteOf = (page, id) => page.evaluate((i) => {
  const e = document.getElementById(i);
  return e ? { text: e.textContent, title: e.title, cls: e.className } : null;
}, id);

async function flow(page) {
  const out = {};
  await page.goto(new URL("/console", base).href, { waitUntil: "load" });
  await page.fill("#tenant", tenant);
  await page.fill("#key", tenantKey);
  await page.fill("#operator", operatorKey);
  await page.getByRole("button", { name: "Sign in" }).click();
  await until(page, 10_000, "sign-in did not open the console", () => page.isVisible("#sections"));
  step("signed in");

  // ---- matchmaking rules ----
  await section(page, "matchmaking", "Matchmaking");
  const none = await until(page, 5000, "arena is not listed as a mode without rules", () => row(page, "#mm-box", "arena"));
  check(/no rules/.test(none[1]), `arena before any rules: ${none}`);
  await page.fill("#rules-mode", "arena");
  await page.fill("#rules-team-size", "1");
  await page.fill("#rules-band-cap", "50");
  await page.fill("#rules-regions", "local=200");
  await page.getByRole("button", { name: "Save rules" }).click();
  const bad = await until(page, 5000, "a band cap under the band start was not refused", async () => {
    const n = await noteOf(page, "mm-note");
    return n?.cls.includes("error") ? n : null;
  });
  check(/Band cap/.test(bad.text) && /Band start/.test(bad.text) && !/invalid_argument|BandCap|rules\.|matchmak\w*:|invalid request/i.test(bad.text), `refusal not in words: ${bad.text}`);
  check(bad.title.startsWith("invalid_argument"), `raw code not on hover: ${bad.title}`);
  out.badRules = bad.text;
  await page.fill("#rules-regions", "local 200");
  await page.getByRole("button", { name: "Save rules" }).click();
  await until(page, 5000, "bad regions were not refused", async () => /region=milliseconds/.test((await noteOf(page, "mm-note"))?.text ?? ""));
  await page.fill("#rules-regions", "local=200");
  await page.fill("#rules-band-cap", "400");
  await page.getByRole("button", { name: "Save rules" }).click();
  await until(page, 5000, "the rules were not saved", async () => /Saved the rules of “arena”/.test((await noteOf(page, "mm-note"))?.text ?? ""));
  await page.reload({ waitUntil: "load" });
  const saved = await until(page, 5000, "the saved rules did not come back", async () => {
    const r = await row(page, "#mm-box", "arena");
    return r && r[1] === "2 × 1" ? r : null;
  });
  check(saved[2].includes("±100") && saved[2].includes("≤ 400") && saved[5] === "local=200", `rules read back: ${saved}`);
  await page.screenshot({ path: join(artifacts, "console-matchmaking.png"), fullPage: true });
  await page.getByRole("button", { name: "edit rules of arena" }).click();
  check((await page.inputValue("#rules-band-cap")) === "400" && (await page.inputValue("#rules-team-size")) === "1", "Edit did not fill the form");
  await page.getByRole("button", { name: "delete rules of arena" }).click();
  check(await page.isVisible("#confirm"), "no confirmation before deleting rules");
  await page.locator("#confirm-ok").click();
  await until(page, 5000, "the deleted rules are still listed", async () => /no rules/.test((await row(page, "#mm-box", "arena"))?.[1] ?? ""));
  out.rules = saved;
  step("matchmaking rules");

  // ---- a player plays; the console opens the game's logs ----
  const pctx = await browser.newContext({ viewport: { width: 900, height: 700 } });
  const player = await pctx.newPage();
  watch(player, "player");
  await player.goto(new URL(`/?tenant=${tenant}&bots=2`, base).href, { waitUntil: "load" });
  await player.getByRole("button", { name: "Play as guest" }).click();
  await until(player, 20_000, "the player sees no frames", async () => (await player.evaluate(() => window.ludus?.framesDrawn ?? 0)) > 10);
  const game = await until(player, 5000, "no game id", () => player.evaluate(() => new URLSearchParams(location.hash.slice(1)).get("game")));
  // The lobby's list names the game by module (host and age when the server says
  // them) and counts the bots apart from the players.
  const listed = await until(player, 8000, "the game is not listed with its player in the player's games list", () => player.evaluate((id) => {
    const td = [...document.querySelectorAll("#games td.id")].find((c) => c.title === id);
    const seats = td?.parentElement.querySelector("td.seats")?.textContent ?? "";
    // Refreshed every 3 s: the row may still be from before the player joined.
    return td && seats.startsWith("1 player") ? { name: td.parentElement.querySelector("td.name")?.textContent, seats } : null;
  }, game));
  check(/^arena( · .+’s? game)?( · (just now|\d+ min ago))?$/.test(listed.name), `the game is listed as ${listed.name}`);
  check(/^1 player( \+ 2 bots)?$/.test(listed.seats), `the game's seats are listed as ${listed.seats}`);
  out.lobbyRow = listed;
  step("player playing");
  await section(page, "games", "Live games");
  await until(page, 10_000, "the game is not listed", () => row(page, "#games-box", game));
  await page.getByRole("button", { name: `logs of game ${game}` }).click();
  check(await page.isVisible("#logs-panel"), "no logs panel");
  check((await page.evaluate(() => document.activeElement?.id)) === "logs-title", "the logs panel did not take the focus");
  const logs = await until(page, 10_000, "the logs never said there is no output", async () => {
    const n = await noteOf(page, "logs-state");
    return /No output yet/.test(n?.text ?? "") ? n : null;
  });
  check(/live from node \S+/.test(logs.text), `the logs do not say where they follow: ${logs.text}`);
  // Still following, still no error, a few seconds and several table refreshes later.
  await page.waitForTimeout(3500);
  const later = await noteOf(page, "logs-state");
  check(!later.cls.includes("error") && /No output yet/.test(later.text), `the logs panel changed to: ${later.text}`);
  check((await page.locator("#logs-lines li").count()) === 0, "lines in the log of a game that prints nothing");
  await page.screenshot({ path: join(artifacts, "console-logs.png"), fullPage: true });
  await page.getByRole("button", { name: "close the logs" }).click();
  check(!(await page.isVisible("#logs-panel")), "Close did not close the logs");
  out.logs = logs.text;
  step("logs");

  // ---- quotas and usage ----
  await section(page, "usage", "Quotas & usage");
  await until(page, 5000, "no quotas", async () => (await text(page, "#quotas-list")).includes("unlimited"));
  const bars = await until(page, 5000, "no usage chart", async () => {
    const n = await page.locator("#usage-chart svg.chart rect").count();
    return n >= 48 ? n : null;
  });
  check(/CPU-seconds.*player-hours/.test((await page.getAttribute("#usage-chart svg", "aria-label")) ?? ""), "the chart has no accessible summary");
  check(await page.isVisible("#quotas-form"), "no quota form with the operator key");
  await page.fill("#quota-liveGames", "50");
  await page.getByRole("button", { name: "Set quotas" }).click();
  await until(page, 5000, "the quotas were not set", async () => /Quotas set/.test((await noteOf(page, "quotas-note"))?.text ?? ""));
  await until(page, 5000, "the new quota is not shown", async () => (await text(page, "#quotas-list")).includes("50 games"));
  await page.screenshot({ path: join(artifacts, "console-usage.png"), fullPage: true });
  out.chartBars = bars;
  step("usage");

  // ---- batch runs ----
  await section(page, "batch", "Batch runs");
  await page.fill("#run-module", "nosuch");
  await page.fill("#run-games", "3");
  await page.getByRole("button", { name: "Start run" }).click();
  const refused = await until(page, 5000, "a run of an unknown module was not refused", async () => {
    const n = await noteOf(page, "run-note");
    return n?.cls.includes("error") ? n : null;
  });
  check(/not started/.test(refused.text) && !/not_found:/.test(refused.text) && refused.title.startsWith("not_found"), `refusal: ${JSON.stringify(refused)}`);
  await page.fill("#run-module", "arena");
  await page.fill("#run-budget", "120");
  await page.fill("#run-config", '{"bots":4,"time_limit_s":5}');
  await page.getByRole("button", { name: "Start run" }).click();
  await until(page, 10_000, "the run did not start", async () => /Started run/.test((await noteOf(page, "run-note"))?.text ?? ""));
  check(await page.isVisible("#run-progress"), "no progress bar");
  const ended = await until(page, 90_000, "the run did not complete", async () => {
    const s = await text(page, "#run-state");
    return s.startsWith("ended") ? s : null;
  });
  check(ended === "ended: every game was played", `run ended: ${ended}`);
  const bar = await page.evaluate(() => { const p = document.getElementById("run-progress"); return { value: p.value, max: p.max }; });
  check(bar.value === 3 && bar.max === 3, `progress bar ${JSON.stringify(bar)}`);
  const summary = await text(page, "#run-summary");
  check(/^3 results: /.test(summary) && /ticks a game/.test(summary), `summary: ${summary}`);
  const href = await until(page, 5000, "no archive link", () => page.getAttribute("#run-archive", "href").catch(() => null));
  const archive = await page.request.get(href);
  check(archive.ok() && (await archive.body()).length > 0, `archive link ${href}: HTTP ${archive.status()}`);
  await page.screenshot({ path: join(artifacts, "console-batch.png"), fullPage: true });
  // Back in the section later, the tab's last run is shown again.
  await section(page, "usage", "Quotas & usage");
  await section(page, "batch", "Batch runs");
  await until(page, 10_000, "the last run is not shown again", async () => (await text(page, "#run-state")) === ended);
  out.batch = { ended, summary, archiveBytes: (await archive.body()).length };
  step("batch run");

  // ---- a phone ----
  await page.setViewportSize({ width: 360, height: 740 });
  for (const [id, title] of [["matchmaking", "Matchmaking"], ["usage", "Quotas & usage"], ["batch", "Batch runs"], ["games", "Live games"]]) {
    await section(page, id, title);
    await page.waitForTimeout(400);
    check(!(await sideways(page)), `${id} scrolls sideways at 360 px (${await page.evaluate(() => document.documentElement.scrollWidth)} px wide)`);
  }
  step("phone");
  await pctx.close();
  return { game, ...out };
}

await h.run(async () => {
  browser = await h.browser();
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  watch(page, "console");
  const result = await flow(page);
  check(!h.pageErrors.length, "errors in the pages");
  return result;
});
