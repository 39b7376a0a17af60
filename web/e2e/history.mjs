// Browser checks of the profile's "Recent matches" and the names on leaderboards,
// driven by e2e/browser_history_test.go:
//
//   LUDUS_TENANT=slug LUDUS_EMAIL=… LUDUS_PASSWORD=… LUDUS_ACCOUNT=a_… \
//   node e2e/history.mjs BASE_URL ARTIFACTS_DIR
//
// A guest's profile says it has no matches yet. The tab signs in with the email
// account (Account, "Sign in with email"), prints "READY" and reads "GAME <id>"
// from stdin: a game the Go test created with a short time limit, which another
// player (Go) plays too. The tab plays it until "Match over", then finds it under
// Recent matches (printed as "ROW <json>" for the Go test to compare with the
// API), sees the leaderboard name both players with its own row marked, and at
// 360 px reads the table without the page scrolling sideways.
//
// Prints a one-line JSON summary and exits 0, or prints the failure and exits 1.
// Screenshots: ARTIFACTS_DIR/history-*.png.

import { join } from "node:path";
import { FAILED_REQUESTS, firstPage, harness, readLine } from "./harness.mjs";

const TOTAL_MS = 120_000;
const [base, artifacts] = process.argv.slice(2);
const { LUDUS_TENANT: tenant, LUDUS_EMAIL: email, LUDUS_PASSWORD: password, LUDUS_ACCOUNT: account } = process.env;
const h = harness({
  name: "history e2e",
  usage: "LUDUS_TENANT=… LUDUS_EMAIL=… LUDUS_PASSWORD=… LUDUS_ACCOUNT=… node e2e/history.mjs BASE_URL ARTIFACTS_DIR",
  argsOk: Boolean(base && artifacts && tenant && email && password && account),
  totalMs: TOTAL_MS,
  steps: true,
  ignoreConsole: FAILED_REQUESTS,
  poll: 150,
});
const { check, until, step } = h;

const route = (page) => page.evaluate(() => window.ludus?.route() ?? "");
const text = (page, sel) => page.evaluate((s) => document.querySelector(s)?.textContent ?? "", sel);

/** The profile's account id once loaded. */
function profileAccount(page) {
  return until(page, 15_000, "the profile did not load", async () => {
    const a = await text(page, "#profile-account");
    return a.startsWith("a_") ? a : null;
  });
}

/** The Recent matches box once loaded: its rows (cells and match id) or its note. */
function history(page) {
  return until(page, 10_000, "Recent matches did not load", () =>
    page.evaluate(() => {
      const box = document.getElementById("history");
      if (!box) return null;
      const rows = [...box.querySelectorAll("tbody tr")].map((tr) => ({
        match: tr.getAttribute("data-match") ?? "",
        cells: [...tr.children].map((td) => td.textContent ?? ""),
      }));
      const note = box.textContent ?? "";
      if (rows.length) return { rows, note: "" };
      return note && note !== "Loading…" ? { rows, note, error: box.className.includes("error") } : null;
    }));
}

async function flow(page) {
  const u = new URL(base);
  u.searchParams.set("tenant", tenant);
  u.hash = "account";
  await page.goto(u.href, { waitUntil: "load" });
  await until(page, 5000, "Account did not open", async () => (await route(page)) === "account");

  // A new guest: no match yet, said in words.
  const guest = await profileAccount(page);
  const empty = await history(page);
  check(empty.rows.length === 0 && /No finished matches yet/.test(empty.note) && !empty.error, `a new guest's Recent matches: ${JSON.stringify(empty)}`);
  step("guest has no matches");

  // Sign in with the email account the test registered.
  await page.fill("#login-email", email);
  await page.fill("#login-password", password);
  await page.locator("#email-login-form").getByRole("button", { name: "Sign in" }).click();
  await until(page, 15_000, "email sign-in did not show the account", async () => (await text(page, "#profile-account")) === account);
  check(guest !== account, "the guest was already the email account");
  step("signed in");

  // Play the test's game until it ends.
  console.log("READY");
  const gameId = await readLine("GAME ");
  await page.evaluate((id) => { location.hash = `game=${encodeURIComponent(id)}`; }, gameId);
  await until(page, 20_000, "no frame of the game drawn", async () => (await page.evaluate(() => window.ludus?.framesDrawn ?? 0)) > 0);
  step("playing");
  await page.keyboard.down("Space"); // fire now and then: a score is more telling than 0
  await page.waitForTimeout(1500);
  await page.keyboard.up("Space");
  const over = await until(page, 60_000, "the end of the match was never shown", async () => {
    const m = await text(page, "#status .message");
    return m.startsWith("Match over") ? m : null;
  });
  step("match over");

  // Recent matches lists it: the result is stored a moment after the page says
  // the match is over, so reload until it shows (a reload stays signed in).
  await page.getByRole("link", { name: "Account" }).click();
  await until(page, 5000, "Account did not open", async () => (await route(page)) === "account");
  const row = await until(page, 20_000, `match ${gameId} never showed under Recent matches`, async () => {
    const h = await history(page);
    check(!h.error, `Recent matches failed: ${h.note}`);
    const r = h.rows.find((x) => x.match === gameId);
    if (r) return r;
    await page.reload({ waitUntil: "load" });
    await profileAccount(page);
    return null;
  });
  console.log(`ROW ${JSON.stringify(row)}`);
  await page.screenshot({ path: join(artifacts, "history-profile.png"), fullPage: true });
  step("in recent matches");

  // The leaderboard names the players and marks this one.
  await page.getByRole("link", { name: "Leaderboards" }).click();
  await until(page, 5000, "Leaderboards did not open", async () => (await route(page)) === "leaderboards");
  const board = await until(page, 15_000, "the leaderboard did not render", () =>
    page.evaluate(() => {
      const rows = [...document.querySelectorAll("#board-box tbody tr")].map((tr) => ({
        me: tr.classList.contains("me"),
        player: tr.children[1]?.textContent ?? "",
        title: tr.children[1]?.firstElementChild?.getAttribute("title") ?? "",
      }));
      return rows.length ? rows : null;
    }));
  console.log(`BOARD ${JSON.stringify(board)}`);
  await page.screenshot({ path: join(artifacts, "history-leaderboard.png") });
  step("leaderboard");

  // A phone: the matches table fits, its players column shown.
  await page.setViewportSize({ width: 360, height: 740 });
  await page.getByRole("link", { name: "Account" }).click();
  await until(page, 5000, "Account did not open on the phone", async () => (await route(page)) === "account");
  await history(page);
  await page.waitForTimeout(300);
  const phone = await page.evaluate(() => {
    const td = document.querySelector("#history tbody tr td.players");
    const r = td?.getBoundingClientRect();
    const opt = document.querySelector("#history tbody tr td.opt");
    const box = document.querySelector("#history .scroll");
    return {
      width: document.documentElement.scrollWidth,
      tableFits: box ? box.scrollWidth <= box.clientWidth : false,
      players: r ? { left: Math.round(r.left), right: Math.round(r.right), shown: r.width > 0 } : null,
      devColumnsHidden: opt ? getComputedStyle(opt).display === "none" : false,
    };
  });
  check(phone.width <= 360, `the page is ${phone.width} px wide at 360 px`);
  check(phone.tableFits, "the matches table scrolls sideways at 360 px");
  check(phone.players?.shown && phone.players.right <= 360, `the players column is not readable at 360 px: ${JSON.stringify(phone.players)}`);
  check(phone.devColumnsHidden, "the played and match columns are not hidden on a phone");
  await page.screenshot({ path: join(artifacts, "history-phone.png"), fullPage: true });
  step("phone");
  return { gameId, over, rows: 1, board: board.length, phone };
}

await h.run(async () => {
  const page = await firstPage(await h.persistentContext("ludus-history-", { viewport: { width: 1280, height: 900 } }));
  h.watch(page);
  const result = await flow(page);
  check(h.pageErrors.length === 0, `page errors: ${h.pageErrors.join(" | ")}`);
  return result;
});
