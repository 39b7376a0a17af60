// Browser check of what a player's page shows when its game fails on the server:
// the Go test (e2e.TestBrowserDesyncShowsTheReason) plays a module whose View
// changes its state, the page joins that game as the second player, and the
// test hands the game off, so that the node it moves to finds other state
// hashes and fails it.
//
//   node e2e/desync.mjs BASE_URL ARTIFACTS_DIR    (stdin: "GAME <id>")
//
// Prints JOINED once the page (a guest) plays the game; then waits for the page to say the
// game stopped because of an error, opens the status bar's details and checks
// the server's reason is there ("desync in game <id>…"), saves desync.png, and
// prints one line of JSON. Everything is bounded by a 120 s timeout.

import { join } from "node:path";
import { FAILED_REQUESTS, firstPage, harness, readLine } from "./harness.mjs";

const [base, artifacts] = process.argv.slice(2);
const h = harness({
  name: "desync e2e",
  usage: "node e2e/desync.mjs BASE_URL ARTIFACTS_DIR",
  argsOk: Boolean(base && artifacts),
  totalMs: 120_000,
  steps: true,
  ignoreConsole: FAILED_REQUESTS,
  poll: 150,
});
const { check, until, step } = h;

const text = (page, sel) => page.evaluate((s) => document.querySelector(s)?.textContent ?? "", sel);

await h.run(async () => {
  const page = await firstPage(await h.persistentContext("ludus-desync-", { viewport: { width: 1100, height: 800 } }));
  h.watch(page);
  const gameId = await readLine("GAME ");
  const u = new URL(base);
  u.searchParams.set("tenant", "demo");
  u.hash = `game=${encodeURIComponent(gameId)}`;
  await page.goto(u.href, { waitUntil: "load" });
  await page.getByRole("button", { name: "Play as guest" }).click(); // "You will join game <id>."
  await until(page, 20_000, "the page never showed the game running", async () =>
    (await text(page, '[data-field="game"]')) === gameId && (await text(page, '[data-field="state"]')) === "running");
  step("joined");
  console.log("JOINED");

  const message = await until(page, 90_000, "the page never said the game stopped", async () => {
    const m = await text(page, "#status .message");
    return m.startsWith("The game stopped because of an error on the server") ? m : null;
  });
  step("told");
  check(await page.evaluate(() => document.getElementById("status-details")?.hidden === true), "the details were open before asked");
  await page.getByRole("button", { name: "details" }).click();
  const reason = await text(page, '[data-field="reason"]');
  const shown = await page.evaluate(() => document.getElementById("status-details")?.hidden === false);
  check(shown, "the details did not open");
  check(reason.includes(`desync in game ${gameId}`), `the details' stop reason is ${JSON.stringify(reason)}, want the server's desync reason`);
  await page.screenshot({ path: join(artifacts, "desync.png") });
  step("reason shown");
  return { gameId, message, reason };
});
