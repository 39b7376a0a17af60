// Browser checks of the lobby's "Find match" (MatchmakingService) against a
// running Ludus gateway whose demo tenant has the `ludus dev` rules for "arena"
// (two teams of two, bots after 45 s), one flow per run:
//
//   node e2e/findmatch.mjs BASE_URL ARTIFACTS_DIR FLOW
//
// FLOW is one of:
//   four    four players (browser contexts of their own) search for "arena": each
//           sees the search (band, time, queue), then all four play the same game
//           (the game id in each page's URL, title and window.ludus.found)
//   party   a player makes a party of two: its invite link (Copy, QR) opened in
//           another context joins it ("Join the party"); with two players searching
//           alone, all four land in one game and the party on one team
//   cancel  a search is cancelled: the page says so in words, and the same tab can
//           search again at once (the server let go of the first search: a search
//           still open would be refused as "already searching")
//
// Prints a one-line JSON summary and exits 0, or prints the failure and exits 1.
// Screenshot: ARTIFACTS_DIR/find-match.png (party flow: the invite and the search).

import { join } from "node:path";
import { FAILED_REQUESTS, harness } from "./harness.mjs";

const TOTAL_MS = 120_000;
const FLOWS = ["four", "party", "cancel"];

const [base, artifacts, flow] = process.argv.slice(2);
const h = harness({
  name: `find-match e2e (${flow})`,
  usage: `node e2e/findmatch.mjs BASE_URL ARTIFACTS_DIR ${FLOWS.join("|")}`,
  argsOk: Boolean(base && artifacts && FLOWS.includes(flow)),
  totalMs: TOTAL_MS,
  ignoreConsole: FAILED_REQUESTS,
  describe: async (page) => {
    const said = await page.evaluate(() => ({
      find: document.getElementById("find-note")?.textContent ?? "",
      search: document.getElementById("search-text")?.textContent ?? "",
      status: document.querySelector("#status .message")?.textContent ?? "",
      route: window.ludus?.route() ?? "",
    })).catch(() => ({}));
    return `; page: ${JSON.stringify(said)}`;
  },
});
const { check, until } = h;
let browser;

/** A player: a browser context of its own (own sessionStorage, own connections). */
async function player(label, href = new URL("/", base).href) {
  const context = await browser.newContext({ viewport: { width: 1100, height: 900 } });
  const page = await context.newPage();
  h.watch(page, label);
  const res = await page.goto(href, { waitUntil: "load", timeout: 15_000 });
  check(res?.ok(), `GET ${href}: HTTP ${res?.status()}`);
  await page.fill("#name", label);
  return page;
}

const hook = (page, name) => page.evaluate((n) => window.ludus[n], name);
const text = (page, id) => page.evaluate((i) => document.getElementById(i)?.textContent ?? "", id);

async function find(page) {
  await page.getByRole("button", { name: /^(Find match|Search again|Join the party)$/ }).click();
}

/** Waits for the search's first update from the server: band, elapsed time, queue size. */
async function searching(page, label) {
  const t = await until(page, 15_000, `${label}: no search update`, async () => {
    const s = await text(page, "search-text");
    return (await page.isVisible("#search")) && / · \d+:\d\d · \d+ search/.test(s) ? s : null;
  });
  check(await page.isVisible("#cancel-search"), `${label}: no Cancel button while searching`);
  return t;
}

/** Waits until the page plays the game it was matched into; returns {game, team, slot, frames}. */
async function playing(page, label) {
  const game = await until(page, 30_000, `${label}: never matched into a game`, async () => {
    const r = await page.evaluate(() => window.ludus.route());
    return r.startsWith("play:") ? r.slice(5) : null;
  });
  await until(page, 20_000, `${label}: no frames of game ${game}`, async () => (await hook(page, "framesDrawn")) > 5);
  const found = await hook(page, "found");
  check(found && found.gameId === game, `${label}: found ${JSON.stringify(found)} but plays ${game}`);
  const url = await page.evaluate(() => new URLSearchParams(location.hash.slice(1)).get("game"));
  check(url === game, `${label}: URL names game ${url}, plays ${game}`);
  check((await text(page, "match-title")).includes(game), `${label}: the title does not name game ${game}`);
  return { game, team: found.team, slot: found.slot, frames: await hook(page, "framesDrawn") };
}

async function fourFlow() {
  const pages = [];
  for (const n of ["ada", "bob", "cyd", "dee"]) pages.push(await player(n));
  check((await pages[0].inputValue("#mode")) === "arena", "the mode field does not default to arena");
  const updates = [];
  for (const [i, p] of pages.entries()) {
    await find(p);
    // The first three wait for a fourth: each sees the server's updates.
    if (i < 3) updates.push(await searching(p, `player ${i + 1}`));
  }
  const got = await Promise.all(pages.map((p, i) => playing(p, `player ${i + 1}`)));
  const games = new Set(got.map((g) => g.game));
  check(games.size === 1, `the four players are in different games: ${JSON.stringify(got)}`);
  const slots = new Set(got.map((g) => g.slot));
  check(slots.size === 4, `two players share a slot: ${JSON.stringify(got)}`);
  // The lobby's list of games (beside the match) counts the four as players, no
  // bots. The list refreshes every 3 s: a refresh may land between the game's
  // creation and its players' joins, so wait for the count to reach four.
  let seats = null;
  await until(pages[0], 10_000, "the games list never counts the four players", async () => {
    seats = await pages[0].evaluate((id) => {
      const td = [...document.querySelectorAll("#games td.id")].find((c) => c.title === id);
      return td ? td.parentElement.querySelector("td.seats")?.textContent : null;
    }, got[0].game);
    return seats === "4 players" ? seats : null;
  }).catch((err) => { throw new Error(`${err.message}: the list says ${seats}`); });
  return { game: got[0].game, players: got, firstUpdate: updates[0] };
}

async function partyFlow() {
  const host = await player("ada");
  await host.selectOption("#party-size", "2");
  await find(host);
  const invite = await until(host, 10_000, "no party invite link", async () => {
    if (!(await host.isVisible("#party"))) return null;
    return host.getAttribute("#party-link", "href");
  });
  const code = new URL(invite).hash.match(/party=([A-Z0-9]+)/)?.[1];
  check(code && new URL(invite).hash.includes("mode=arena") && new URL(invite).hash.includes("size=2"), `invite link ${invite}`);
  check((await text(host, "party-text")).includes(code), "the party text does not show the code");
  // Waiting for the other member: the server counts who is here.
  await until(host, 15_000, "the host is not told the party is waiting", async () => /waiting for your party: 1 of 2 here/.test(await text(host, "search-text")));
  await host.getByRole("button", { name: "QR code of the party invite link" }).click();
  check(await host.isVisible("#party-qr svg"), "no QR code of the party invite");
  check((await host.getAttribute("#party-qr svg", "aria-label")).includes(invite), "the QR code is not of the invite link");
  await host.screenshot({ path: join(artifacts, "find-match.png") });

  const friend = await player("bob", invite);
  check((await friend.evaluate(() => window.ludus.route())) === `party:${code}`, "the invite link did not open the party");
  check(await friend.isDisabled("#mode"), "the invited player can change the party's mode");
  check(/invited to a party of 2/.test(await text(friend, "find-note")), "the invited player is not told about the party");
  await friend.getByRole("button", { name: "Join the party" }).click();
  // Two more players search alone: the party and the two fill the 2 × 2 match.
  const solo = [await player("cyd"), await player("dee")];
  for (const p of solo) await find(p);
  const [h, f, c, d] = await Promise.all([host, friend, ...solo].map((p, i) => playing(p, ["host", "friend", "solo 1", "solo 2"][i])));
  check(new Set([h.game, f.game, c.game, d.game]).size === 1, `not one game: ${JSON.stringify([h, f, c, d])}`);
  check(h.team === f.team, `the party is split: host on team ${h.team}, friend on team ${f.team}`);
  check(c.team === d.team && c.team !== h.team, `the solo players are not the other team: ${JSON.stringify([h, f, c, d])}`);
  return { code, game: h.game, teams: { party: h.team, solo: c.team } };
}

async function cancelFlow() {
  const page = await player("eve");
  await find(page);
  const first = await searching(page, "eve");
  await page.getByRole("button", { name: "Cancel" }).click();
  await until(page, 5000, "cancel did not end the search", async () => (await hook(page, "search")) === "stopped");
  const note = await text(page, "find-note");
  check(note === "Search cancelled.", `after Cancel the page says: ${note}`);
  check(!(await page.isVisible("#search")), "the search panel stayed after Cancel");
  check((await page.getByRole("button", { name: "Search again" }).isEnabled()), "no Search again after Cancel");
  check((await page.evaluate(() => window.ludus.route())) === "lobby", "Cancel left the lobby");
  // The server let go of the first search: a second one is accepted.
  await find(page);
  const again = await searching(page, "eve again");
  check((await hook(page, "search")) === "searching", "the second search is not running");
  await page.getByRole("button", { name: "Cancel" }).click();
  await until(page, 5000, "the second cancel did not end the search", async () => (await hook(page, "search")) === "stopped");
  return { first, again };
}

await h.run(async () => {
  browser = await h.browser();
  const out = await { four: fourFlow, party: partyFlow, cancel: cancelFlow }[flow]();
  check(!h.pageErrors.length, "errors in the pages");
  return { flow, ...out };
});
