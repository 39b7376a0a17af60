// Browser checks of the studio console (/console) against a running Ludus gateway:
//
//   LUDUS_TENANT=slug LUDUS_KEY=lds_… LUDUS_OPERATOR_KEY=… GOOD_WASM=path BAD_WASM=path \
//     node e2e/console.mjs BASE_URL ARTIFACTS_DIR
//
// The tenant must be fresh (no modules, no games). The flow: sign in with the
// tenant's admin key (kept in sessionStorage only); the operator sections say they
// need the operator key; upload a file that is not a module (the validation error
// in words, the raw code on hover) and a good one (listed); create, list and revoke
// an API key (shown once); sign out (the key is gone) and sign in with both keys; a
// player plays in another tab: the console lists the game (module, players, tick,
// node), its spectate link opens the spectator view, "Hand off" moves it and says
// where; draining its node (after a confirmation) keeps the player's frames coming;
// "End" (after a confirmation) ends it and the player's page says the operators did;
// webhooks, result rules (a bad rule refused in words), leaderboards, match
// results and tenants; every section at 360 px without sideways scrolling.
//
// Prints a one-line JSON summary and exits 0, or prints the failure and exits 1.
// Screenshots: ARTIFACTS_DIR/console-*.png.

import { join } from "node:path";
import { consolePages } from "./console-pages.mjs";
import { FAILED_REQUESTS, firstPage, harness } from "./harness.mjs";

const TOTAL_MS = 150_000;

const [base, artifacts] = process.argv.slice(2);
const { LUDUS_TENANT: tenant, LUDUS_KEY: tenantKey, LUDUS_OPERATOR_KEY: operatorKey, GOOD_WASM: goodWasm, BAD_WASM: badWasm } = process.env;
const h = harness({
  name: "console e2e",
  usage: "LUDUS_TENANT= LUDUS_KEY= LUDUS_OPERATOR_KEY= GOOD_WASM= BAD_WASM= node e2e/console.mjs BASE_URL ARTIFACTS_DIR",
  argsOk: Boolean(base && artifacts && tenant && tenantKey && operatorKey && goodWasm && badWasm),
  totalMs: TOTAL_MS,
  steps: true,
  // RPCs the flow makes fail on purpose (a bad upload, a bad rule) log failed requests.
  ignoreConsole: FAILED_REQUESTS,
});
const { check, until, step, watch } = h;
const { text, section, row, sideways } = consolePages(until);
let context;

const frames = (page) => page.evaluate(() => window.ludus?.framesDrawn ?? 0);

async function signIn(page, key, operator = "") {
  await page.fill("#tenant", tenant);
  await page.fill("#key", key);
  await page.fill("#operator", operator);
  await page.getByRole("button", { name: "Sign in" }).click();
  await until(page, 10_000, "sign-in did not open the console", () => page.isVisible("#sections"));
}

async function consoleFlow(page) {
  const out = {};
  // ---- sign in with the tenant's admin key ----
  await page.goto(new URL("/console", base).href, { waitUntil: "load" });
  check(await page.isVisible("#signin"), "no sign-in form at /console");
  await signIn(page, tenantKey);
  step("signed in");
  check((await page.evaluate(() => location.hash)) === "#games", "sign-in did not open the games");
  const stored = await page.evaluate(() => ({ s: sessionStorage.getItem("ludus.console") ?? "", l: localStorage.length }));
  check(stored.s.includes(tenantKey) && stored.l === 0, "the key is not in sessionStorage only");
  await until(page, 5000, "no empty state for games", async () => /No games running/.test(await text(page, "#games-box")));
  await section(page, "nodes", "Nodes");
  check(/operator key/.test(await text(page, "#view-body")), "nodes did not say they need the operator key");

  // ---- modules: a bad file, then a good one ----
  await section(page, "modules", "Modules");
  await until(page, 5000, "no empty state for modules", async () => /No modules yet/.test(await text(page, "#modules-box")));
  await page.setInputFiles("#module-file", badWasm);
  await page.fill("#module-name", "broken");
  await page.getByRole("button", { name: "Upload" }).click();
  const bad = await until(page, 10_000, "no error for a bad module", async () => {
    const n = await page.evaluate(() => { const e = document.getElementById("upload-note"); return { text: e.textContent, title: e.title, cls: e.className, role: e.getAttribute("role") }; });
    return n.cls.includes("error") ? n : null;
  });
  check(/module rejected/i.test(bad.text) && !/invalid_argument/.test(bad.text), `bad upload not said in words: ${bad.text}`);
  check(bad.title.startsWith("invalid_argument:") && bad.role === "alert", `raw code not on hover: ${JSON.stringify(bad)}`);
  out.badUpload = bad.text;
  await page.screenshot({ path: join(artifacts, "console-upload-error.png") });
  step("bad upload refused");

  await page.fill("#module-name", "");
  await page.setInputFiles("#module-file", goodWasm);
  check((await page.inputValue("#module-name")) === "arena", "the name was not taken from the file name");
  await page.getByRole("button", { name: "Upload" }).click();
  await until(page, 20_000, "the good module was not uploaded", async () => /Uploaded “arena”/.test(await text(page, "#upload-note")));
  const mod = await until(page, 5000, "arena not listed", () => row(page, "#modules-box", "arena"));
  check(mod[0] === "arena", `module row: ${mod}`);
  await page.screenshot({ path: join(artifacts, "console-modules.png") });
  step("module uploaded");

  // ---- API keys: create (shown once), revoke ----
  await section(page, "keys", "API keys");
  await page.fill("#key-name", "ci");
  await page.selectOption("#key-scope", "read-only");
  await page.getByRole("button", { name: "Create key" }).click();
  const secret = await until(page, 5000, "no secret shown", async () => (await text(page, "#key-secret .secret-value")) || null);
  check(/^lds_/.test(secret), `secret ${secret}`);
  check(/only this once/.test(await text(page, "#key-secret")), "no shown-once warning");
  await until(page, 5000, "new key not listed", () => row(page, "#keys-box", "ci"));
  await page.getByRole("button", { name: "revoke key ci" }).click();
  check(await page.isVisible("#confirm"), "no confirmation before revoking");
  await page.locator("#confirm-ok").click();
  await until(page, 5000, "revoked key still listed", async () => (await row(page, "#keys-box", "read-only")) === null);
  step("key created and revoked");

  // ---- sign out, sign in with both keys ----
  await page.getByRole("button", { name: "Sign out" }).click();
  await until(page, 5000, "sign out did not show the sign-in form", () => page.isVisible("#signin"));
  check((await page.evaluate(() => sessionStorage.getItem("ludus.console"))) === null, "sign out left the key in sessionStorage");
  await signIn(page, tenantKey, operatorKey);
  check(/operator/.test(await text(page, "#who")), "not signed in as operator");
  step("signed in with both keys");

  // ---- a player plays in another tab ----
  const player = await context.newPage();
  watch(player, "player");
  await player.goto(new URL(`/?tenant=${tenant}&bots=0`, base).href, { waitUntil: "load" });
  await player.getByRole("button", { name: "Play as guest" }).click();
  await until(player, 20_000, "the player sees no frames", async () => (await frames(player)) > 10);
  const game = await until(player, 5000, "no game id", () => player.evaluate(() => new URLSearchParams(location.hash.slice(1)).get("game")));
  step("player playing");

  await page.bringToFront();
  await section(page, "games", "Live games");
  const listed = await until(page, 10_000, "the game is not listed", async () => {
    const r = await row(page, "#games-box", game);
    return r && r[1] === "arena" && /^1\//.test(r[2]) && Number(r[3]) > 0 && r[4] !== "—" ? r : null;
  });
  const spectate = await page.getAttribute(`a[aria-label="spectate game ${game}"]`, "href");
  check(spectate.includes(`tenant=${tenant}`) && spectate.endsWith(`#spectate=${game}`), `spectate link ${spectate}`);
  const watcher = await context.newPage();
  watch(watcher, "spectator");
  await watcher.goto(spectate, { waitUntil: "load" });
  await until(watcher, 20_000, "the spectate link shows no frames", async () => (await watcher.evaluate(() => window.ludus?.route())) === `spectate:${game}` && (await frames(watcher)) > 5);
  await watcher.close();
  await page.screenshot({ path: join(artifacts, "console-games.png") });
  step("game listed, spectated");

  // ---- hand off ----
  const before = listed[4];
  await page.getByRole("button", { name: `hand off game ${game} to another node` }).click();
  const moved = await until(page, 20_000, "no handoff result", async () => {
    const n = await page.evaluate(() => { const e = document.getElementById("games-note"); return { text: e.textContent, cls: e.className }; });
    return /Moved game|Could not move/.test(n.text) ? n : null;
  });
  check(moved.cls.includes("ok"), `handoff failed: ${moved.text}`);
  const to = moved.text.match(/ to (\S+);/)?.[1];
  check(to && to !== before && moved.text.includes(`from ${before}`), `handoff result: ${moved.text}`);
  await until(page, 10_000, "the list does not show the new node", async () => (await row(page, "#games-box", game))?.[4] === to);
  let f = await frames(player);
  await until(player, 10_000, "the player's frames stopped after the handoff", async () => (await frames(player)) > f + 20);
  out.handoff = moved.text;
  step("handed off");

  // ---- drain the node the game is on, while the player plays ----
  await section(page, "nodes", "Nodes");
  await until(page, 5000, `node ${to} not listed`, () => row(page, "#nodes-box", to));
  await page.getByRole("button", { name: `drain node ${to}` }).click();
  check(await page.isVisible("#confirm"), "no confirmation before draining");
  check((await text(page, "#confirm-text")).includes(to), "the confirmation does not name the node");
  await page.locator("#confirm-ok").click();
  const drained = await until(page, 10_000, "no drain result", async () => {
    const n = await text(page, "#nodes-note");
    return /Draining|Could not drain/.test(n) ? n : null;
  });
  check(drained.startsWith(`Draining ${to}`), `drain: ${drained}`);
  await page.screenshot({ path: join(artifacts, "console-nodes.png") });
  await until(page, 30_000, `${to} never left the fleet`, async () => (await row(page, "#nodes-box", to)) === null);
  f = await frames(player);
  await until(player, 15_000, "the player's frames stopped after the drain", async () => (await frames(player)) > f + 30);
  check((await player.evaluate(() => window.ludus.route())) === `play:${game}`, "the player left the game");
  await section(page, "games", "Live games");
  const after = await until(page, 10_000, "the game is not listed after the drain", () => row(page, "#games-box", game));
  check(after[4] !== to && after[4] !== "—", `after the drain the game is on ${after[4]}`);
  out.drain = { node: to, nowOn: after[4], framesAfter: (await frames(player)) - f };
  step("drained");

  // ---- end the game: confirmed first; the player is told why ----
  await page.getByRole("button", { name: `end game ${game}` }).click();
  check(await page.isVisible("#confirm"), "no confirmation before ending a game");
  check((await text(page, "#confirm-text")).includes(game), "the confirmation does not name the game");
  await page.locator("#confirm-ok").click();
  const ended = await until(page, 10_000, "no end result", async () => {
    const n = await text(page, "#games-note");
    return /Ended game|Could not end/.test(n) ? n : null;
  });
  check(ended.startsWith(`Ended game ${game}`), `end: ${ended}`);
  await until(player, 10_000, "the player was not told the game was ended", async () =>
    /ended by its operators: from the studio console/.test(await player.evaluate(() => document.body.innerText)));
  await until(page, 10_000, "the ended game is still listed as running", async () => {
    const r = await row(page, "#games-box", game);
    return r === null || r[5] !== "running";
  });
  step("game ended");

  // ---- webhooks ----
  await section(page, "webhooks", "Webhooks");
  await until(page, 5000, "no deliveries empty state", async () => /No deliveries yet/.test(await text(page, "#deliveries-box")));
  await until(page, 5000, "the console does not say no webhook is set", async () => /No webhook is set/.test(await text(page, "#webhook-current")));
  // A name that does not resolve here (no network): refused, in words.
  await page.fill("#webhook-url", "https://studio.example/ludus-hook");
  await page.getByRole("button", { name: "Set webhook" }).click();
  const hookErr = await until(page, 5000, "no webhook error", async () => {
    const n = await page.evaluate(() => { const e = document.getElementById("webhook-note"); return { text: e.textContent, title: e.title, cls: e.className }; });
    return n.cls.includes("error") ? n : null;
  });
  check(/public internet address/.test(hookErr.text) && !/invalid_argument/.test(hookErr.text), `webhook error: ${hookErr.text}`);
  // A public address (nothing is delivered: no match ends here).
  await page.fill("#webhook-url", "https://93.184.215.14/ludus-hook");
  await page.getByRole("button", { name: "Set webhook" }).click();
  await until(page, 5000, "no webhook secret", async () => (await text(page, "#webhook-secret .secret-value")).length > 8);
  check((await text(page, "#webhook-note")).includes("Webhook set"), "no webhook confirmation");
  // Read back: the section says where results go, also after a reload.
  await until(page, 5000, "the webhook URL is not read back", async () => (await text(page, "#webhook-current")).includes("https://93.184.215.14/ludus-hook"));
  await page.reload();
  await until(page, 5000, "the webhook URL is not shown after a reload", async () =>
    (await text(page, "#webhook-current")).includes("https://93.184.215.14/ludus-hook") &&
    (await page.inputValue("#webhook-url")) === "https://93.184.215.14/ludus-hook");
  step("webhook set");

  // ---- results: rules (a bad one refused), leaderboard, match results ----
  await section(page, "results", "Results");
  await until(page, 5000, "no match results empty state", async () => /No match results yet/.test(await text(page, "#results-box")));
  await until(page, 5000, "no rules empty state", async () => /No rules/.test(await text(page, "#rules-box")));
  await page.getByRole("button", { name: "Add rule" }).click();
  await page.fill("#rule-0-stat", "score");
  await page.fill("#rule-0-cap", "0");
  await page.locator("#rule-0-cap").dispatchEvent("change");
  await page.locator("#rule-0-stat").dispatchEvent("change");
  await page.getByRole("button", { name: "Save rules" }).click();
  const badRule = await until(page, 5000, "a bad rule was not refused", async () => {
    const n = await page.evaluate(() => { const e = document.getElementById("rules-note"); return { text: e.textContent, title: e.title, cls: e.className }; });
    return n.cls.includes("error") ? n : null;
  });
  check(/cap/.test(badRule.text) && !/invalid_argument/.test(badRule.text) && badRule.title.startsWith("invalid_argument"), `bad rule: ${JSON.stringify(badRule)}`);
  await page.fill("#rule-0-cap", "500");
  await page.locator("#rule-0-cap").dispatchEvent("change");
  await page.getByRole("button", { name: "Save rules" }).click();
  await until(page, 5000, "the rule was not saved", async () => /Saved 1 rule/.test(await text(page, "#rules-note")));
  await page.reload({ waitUntil: "load" });
  await until(page, 5000, "the saved rule did not come back", async () => (await page.inputValue("#rule-0-stat").catch(() => "")) === "score");
  await page.fill("#board-game", "arena");
  await page.locator("#board-form").getByRole("button", { name: "Show" }).click();
  await until(page, 5000, "no leaderboard empty state", async () => /No entries on arena/.test(await text(page, "#board-box")));
  out.badRule = badRule.text;
  step("results");

  // ---- tenants ----
  await section(page, "tenants", "Tenants");
  await until(page, 5000, "the tenant is not listed", () => row(page, "#tenants-box", tenant));
  step("tenants");

  // ---- a phone: 360 px, no sideways scrolling in any section ----
  await page.setViewportSize({ width: 360, height: 740 });
  const widths = {};
  for (const [id, title] of [["games", "Live games"], ["modules", "Modules"], ["keys", "API keys"], ["webhooks", "Webhooks"], ["results", "Results"], ["nodes", "Nodes"], ["tenants", "Tenants"]]) {
    await section(page, id, title);
    await page.waitForTimeout(300);
    widths[id] = await page.evaluate(() => document.documentElement.scrollWidth);
    check(!(await sideways(page)), `${id} scrolls sideways at 360 px (${widths[id]} px wide)`);
    if (id === "games") await page.screenshot({ path: join(artifacts, "console-phone.png"), fullPage: true });
  }
  await section(page, "results", "Results");
  await page.screenshot({ path: join(artifacts, "console-phone-results.png"), fullPage: true });
  out.phoneWidths = widths;
  step("phone");
  await player.close();
  return { game, ...out };
}

await h.run(async () => {
  context = await h.persistentContext("ludus-console-", { viewport: { width: 1280, height: 900 } });
  const page = await firstPage(context);
  watch(page, "console");
  return consoleFlow(page);
});
