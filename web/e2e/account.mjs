// Browser checks of the player site's account pages against a running Ludus gateway:
//
//   node e2e/account.mjs BASE_URL ARTIFACTS_DIR
//
// A guest opens Account from the lobby, keeps the account with an email and a
// password (LinkEmail), signs out (a new guest), fails to sign in with a wrong
// password (said in words), signs in with the email: the profile is the same
// account, also after a reload (Refresh). Leaderboards render; Back and Forward
// move between the pages; at 360 px nothing scrolls sideways.
//
// Prints a one-line JSON summary and exits 0, or prints the failure and exits 1.
// Screenshots: ARTIFACTS_DIR/account-*.png.

import { join } from "node:path";
import { FAILED_REQUESTS, firstPage, harness } from "./harness.mjs";

const TOTAL_MS = 90_000;
const [base, artifacts] = process.argv.slice(2);
const h = harness({
  name: "account e2e",
  usage: "node e2e/account.mjs BASE_URL ARTIFACTS_DIR",
  argsOk: Boolean(base && artifacts),
  totalMs: TOTAL_MS,
  steps: true,
  ignoreConsole: FAILED_REQUESTS,
});
const { check, until, step } = h;

const text = (page, sel) => page.evaluate((s) => document.querySelector(s)?.textContent ?? "", sel);
const route = (page) => page.evaluate(() => window.ludus?.route() ?? "");

/** The profile once loaded: account id, sign-in kind, level. */
function profile(page) {
  return until(page, 10_000, "the profile did not load", async () => {
    const p = await page.evaluate(() => ({
      account: document.getElementById("profile-account")?.textContent ?? "",
      signin: document.getElementById("profile-signin")?.textContent ?? "",
      level: document.getElementById("profile-level")?.textContent ?? "",
      xp: document.getElementById("profile-xp")?.textContent ?? "",
    }));
    return p.account.startsWith("a_") && p.level ? p : null;
  });
}

async function accountFlow(page) {
  const email = `player-${Date.now().toString(36)}@example.com`;
  const password = "correct horse battery";
  await page.goto(base, { waitUntil: "load" });
  await until(page, 5000, "no lobby", async () => (await route(page)) === "lobby");

  // A guest's profile, reached from the lobby.
  await page.getByRole("link", { name: "Account" }).click();
  await until(page, 5000, "Account did not open", async () => (await route(page)) === "account");
  check((await page.evaluate(() => document.title)) === "Account — Ludus", "account page title");
  const guest = await profile(page);
  check(/^guest/.test(guest.signin), `a new tab is not a guest: ${guest.signin}`);
  check(await page.isHidden("#lobby") && await page.isHidden("#match"), "the lobby is still shown");
  step("guest profile");

  // Keep the account: email and password.
  await page.fill("#upgrade-email", email);
  await page.fill("#upgrade-password", password);
  await page.getByRole("button", { name: "Save account" }).click();
  await until(page, 15_000, "the account was not saved", async () => /Saved: sign in with/.test(await text(page, "#account-note")));
  const saved = await profile(page);
  check(saved.account === guest.account && saved.signin === `email ${email}`, `after saving: ${JSON.stringify(saved)}`);
  await page.screenshot({ path: join(artifacts, "account-saved.png") });
  step("upgraded");

  // Sign out: a new guest.
  const device = await page.evaluate(() => sessionStorage.getItem("ludus.guest.demo"));
  await page.getByRole("button", { name: "Sign out" }).click();
  const out = await until(page, 10_000, "sign out did not show a guest", async () => {
    const p = await profile(page);
    return p.account !== guest.account && /^guest/.test(p.signin) ? p : null;
  });
  check((await page.evaluate(() => sessionStorage.getItem("ludus.guest.demo"))) !== device, "sign out kept the device id");
  check(await page.isVisible("#email-login-form"), "no email sign-in form after signing out");
  step("signed out");

  // A wrong password: said in words, the code on hover.
  await page.fill("#login-email", email);
  await page.fill("#login-password", "not the password");
  await page.locator("#email-login-form").getByRole("button", { name: "Sign in" }).click();
  const wrong = await until(page, 15_000, "no error for a wrong password", async () => {
    const n = await page.evaluate(() => { const e = document.getElementById("account-note"); return { text: e.textContent, title: e.title, cls: e.className }; });
    return n.cls.includes("error") ? n : null;
  });
  check(wrong.text === "Could not sign in: Wrong email or password." && wrong.title.startsWith("unauthenticated:"), `wrong password: ${JSON.stringify(wrong)}`);
  step("wrong password refused");

  // The right one: the same account as before.
  await page.fill("#login-password", password);
  await page.locator("#email-login-form").getByRole("button", { name: "Sign in" }).click();
  const back = await until(page, 15_000, "email sign-in did not show the account", async () => {
    const p = await profile(page);
    return p.account === guest.account ? p : null;
  });
  check(back.signin === `email ${email}`, `signed in as ${back.signin}`);
  check(/Sign out/.test(await text(page, "#account")), "no Sign out when signed in with email");
  check(new RegExp(email.replace(/[.]/g, "\\.")).test(await text(page, "#who")), "the header does not name the email account");

  // A reload stays signed in (the refresh token, this tab only).
  await page.reload({ waitUntil: "load" });
  const reloaded = await profile(page);
  check(reloaded.account === guest.account && reloaded.signin === `email ${email}`, `after reload: ${JSON.stringify(reloaded)}`);
  check((await page.evaluate(() => localStorage.length)) === 0, "something went into localStorage");
  await page.screenshot({ path: join(artifacts, "account-profile.png") });
  step("signed in with email");

  // Leaderboards, and history between the pages.
  await page.getByRole("link", { name: "Leaderboards" }).click();
  await until(page, 5000, "Leaderboards did not open", async () => (await route(page)) === "leaderboards");
  const board = await until(page, 10_000, "the leaderboard did not render", async () => {
    const b = await page.evaluate(() => ({
      rows: document.querySelectorAll("#board-box tbody tr").length,
      text: document.getElementById("board-box")?.textContent ?? "",
      cls: document.getElementById("board-box")?.className ?? "",
    }));
    return b.rows > 0 || /leaderboard yet/.test(b.text) ? b : b.cls.includes("error") ? Promise.reject(new Error(`leaderboard error: ${b.text}`)) : null;
  });
  check((await page.inputValue("#board-game")) === "arena", "the leaderboard is not the lobby's game");
  await page.check("#board-around");
  await page.locator("#board-form").getByRole("button", { name: "Show" }).click();
  await until(page, 10_000, "around me did not render", async () => /You are not on|you/.test(await text(page, "#board-box")));
  await page.screenshot({ path: join(artifacts, "account-leaderboards.png") });
  await page.goBack();
  await until(page, 5000, "Back did not return to Account", async () => (await route(page)) === "account");
  await profile(page);
  await page.goForward();
  await until(page, 5000, "Forward did not return to Leaderboards", async () => (await route(page)) === "leaderboards");
  await page.click("#home");
  await until(page, 5000, "the home link did not lead to the lobby", async () => (await route(page)) === "lobby" && page.isVisible("#lobby"));
  step("leaderboards");

  // A phone: nothing scrolls sideways.
  await page.setViewportSize({ width: 360, height: 740 });
  const widths = {};
  for (const [name, link] of [["account", "Account"], ["leaderboards", "Leaderboards"]]) {
    await page.getByRole("link", { name: link }).click();
    await until(page, 5000, `${name} did not open`, async () => (await route(page)) === name);
    await page.waitForTimeout(500);
    widths[name] = await page.evaluate(() => document.documentElement.scrollWidth);
    if (widths[name] > 360) {
      const wide = await page.evaluate(() => [...document.querySelectorAll("body *")]
        .filter((e) => e.getBoundingClientRect().right > 360 && e.getClientRects().length)
        .slice(0, 4).map((e) => `${e.tagName.toLowerCase()}${e.id ? `#${e.id}` : ""}.${e.className}: ${Math.round(e.getBoundingClientRect().right)}`));
      throw new Error(`${name} is ${widths[name]} px wide at 360 px: ${wide.join(", ")}`);
    }
  }
  await page.getByRole("link", { name: "Account" }).click();
  await profile(page);
  await page.screenshot({ path: join(artifacts, "account-phone.png"), fullPage: true });
  step("phone");
  return { account: guest.account, guestAfterSignOut: out.account, email, board: board.rows ? `${board.rows} rows` : board.text, widths };
}

await h.run(async () => {
  const page = await firstPage(await h.persistentContext("ludus-account-", { viewport: { width: 1280, height: 900 } }));
  h.watch(page);
  const result = await accountFlow(page);
  check(h.pageErrors.length === 0, `page errors: ${h.pageErrors.join(" | ")}`);
  return result;
});
