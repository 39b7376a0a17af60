// Browser checks of the player site against a running Ludus gateway, one flow per run:
//
//   node e2e/site.mjs BASE_URL ARTIFACTS_DIR FLOW
//
// FLOW is one of:
//   meta     the page is presented from the module's metadata: title, hint, key hints,
//            screen aspect ratio and controls; a different module's metadata (the
//            window.ludus.applyMeta hook, as a Status.module_meta would) re-labels the
//            page, resizes the screen and re-maps the keys (old keys do nothing, the
//            new one turns the player)
//   session  identity per tab: reload and Forward re-join the match without a click,
//            Back returns to the lobby, an invite link opened in another tab is a
//            second player whose name field is empty; the tenant field
//   status   the one-line status bar (fps, rtt from Ping, kbit/s, mode) at 360 px does
//            not wrap; details toggle; then, when the driver hands the game off to
//            another node (it prints "GAME <id>" and waits for "moved" on stdin), the
//            migration count and the last one's duration stay visible
//   errors   a game that does not exist: words instead of codes, no links to it, no
//            Retry; streams that fail: bounded retries, then a Retry button that works;
//            the styled 404 page and its link home
//   phone    390×844 touch screen: touch buttons from the controls move the player,
//            copy and QR of the links, full screen, and the lobby's games table at
//            360 px does not clip
//
// Prints a one-line JSON summary and exits 0, or prints the failure and exits 1.
// Screenshots go to ARTIFACTS_DIR/web-FLOW.png (and web-lobby.png, web-404.png).

import { join } from "node:path";
import { createInterface } from "node:readline";
import { FAILED_REQUESTS, firstPage, harness } from "./harness.mjs";

const TOTAL_MS = 120_000;
const FRAME_MS = 20_000;

const [base, artifacts, flow] = process.argv.slice(2);
const FLOWS = ["meta", "session", "status", "errors", "phone"];
const h = harness({
  name: `site e2e (${flow})`,
  usage: `node e2e/site.mjs BASE_URL ARTIFACTS_DIR ${FLOWS.join("|")}`,
  argsOk: Boolean(base && artifacts && FLOWS.includes(flow)),
  totalMs: TOTAL_MS,
  // Failed requests the flows cause on purpose (aborted streams, 404s) are not page errors.
  ignoreConsole: FAILED_REQUESTS,
  describe: async (page) => `; status bar: ${JSON.stringify(await statusText(page).catch(() => ({})))}`,
});
const { check, until, watch } = h;
let context;

function url(params = {}, hash = "") {
  const u = new URL(base);
  for (const [k, v] of Object.entries(params)) u.searchParams.set(k, v);
  u.hash = hash;
  return u.href;
}

/**
 * In the page: whether the canvas shows anything but one colour, an FNV-1a hash of it,
 * and `world`, a hash of the band between the arena's HUD lines (rows 30 to h-35), which
 * changes only when the player's view of the world does (the HUD's clock ticks).
 */
function canvasState() {
  const c = document.getElementById("view");
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  const first = d[0] | (d[1] << 8) | (d[2] << 16);
  let uniform = true;
  let h = 0x811c9dc5;
  let w = 0x811c9dc5;
  const lo = 30 * c.width * 4;
  const hi = (c.height - 35) * c.width * 4;
  for (let i = 0; i < d.length; i += 4) {
    const v = d[i] | (d[i + 1] << 8) | (d[i + 2] << 16);
    if (v !== first) uniform = false;
    h = Math.imul(h ^ v, 16777619) >>> 0;
    if (i >= lo && i < hi) w = Math.imul(w ^ v, 16777619) >>> 0;
  }
  return { drawn: !uniform, hash: h.toString(16).padStart(8, "0"), world: w.toString(16).padStart(8, "0"), frames: window.ludus?.framesDrawn ?? 0 };
}

function statusText(page) {
  return page.evaluate(() => {
    const out = {};
    for (const el of document.querySelectorAll("[data-field]")) out[el.dataset.field] = el.textContent;
    out.message = document.querySelector("#status .message")?.textContent ?? "";
    out.route = window.ludus?.route() ?? "";
    return out;
  });
}

/** Waits for a frame drawn after `after` frames (default: any). */
function frameDrawn(page, label, after = 0) {
  return until(page, FRAME_MS, `${label}: no frame drawn within ${FRAME_MS / 1000} s`, async () => {
    const s = await page.evaluate(canvasState);
    return s.drawn && s.frames > after ? s : null;
  });
}

/** Waits until the world in view stops changing (a game with no bots), returns its hash. */
async function still(page, label) {
  let last = "";
  let same = 0;
  return until(page, 10_000, `${label}: the view never stood still`, async () => {
    const s = await page.evaluate(canvasState);
    same = s.world === last ? same + 1 : 0;
    last = s.world;
    return same >= 6 ? s.world : null;
  });
}

/** Waits until the world in view differs from `before` (the player moved). */
function moved(page, what, before) {
  return until(page, 8000, what, async () => (await page.evaluate(canvasState)).world !== before);
}

async function hold(page, key, ms) {
  await page.keyboard.down(key);
  await page.waitForTimeout(ms);
  await page.keyboard.up(key);
}

const gameOf = (page) => page.evaluate(() => new URLSearchParams(location.hash.slice(1)).get("game"));
const hook = (page, name) => page.evaluate((n) => window.ludus[n], name);
const route = (page) => page.evaluate(() => window.ludus.route());
const field = (page, f) => page.evaluate((n) => document.querySelector(`[data-field="${n}"]`)?.textContent ?? "", f);

async function playAsGuest(page, name = "") {
  if (name) await page.fill("#name", name);
  await page.getByRole("button", { name: "Play as guest" }).click({ timeout: 10_000 });
  await frameDrawn(page, "play");
  return until(page, 5000, "game id never appeared in the URL", () => gameOf(page));
}

async function open(page, href) {
  const res = await page.goto(href, { waitUntil: "load", timeout: 15_000 });
  check(res?.ok(), `GET ${href}: HTTP ${res?.status()}`);
}

// ---- flows ----

async function metaFlow(page) {
  await open(page, url({ bots: "0" }));
  await playAsGuest(page);
  await until(page, 5000, "no module metadata applied", () => hook(page, "meta"));
  const meta = await hook(page, "meta");
  const shown = await page.evaluate(() => ({
    title: document.getElementById("match-title").textContent,
    doc: document.title,
    hint: document.getElementById("hint").textContent,
    keys: document.getElementById("keys").textContent,
    w: document.getElementById("screen").getBoundingClientRect().width,
    h: document.getElementById("screen").getBoundingClientRect().height,
    lobbyText: document.getElementById("lobby").hidden,
  }));
  // The arena's metadata, from the server (Status.module_meta) or the page's fallback.
  check(meta.title === "Arena" && meta.controls.length === 7, `arena meta: ${JSON.stringify(meta)}`);
  check(shown.title.startsWith("Arena") && shown.doc.includes("Arena"), `arena title: ${JSON.stringify(shown)}`);
  check(shown.hint === meta.hint && shown.hint.length > 0, `arena hint: ${shown.hint}`);
  check(shown.keys.includes("forward: W/↑") && shown.keys.includes("fire: Space"), `arena keys: ${shown.keys}`);
  check(Math.abs(shown.w / shown.h - 320 / 200) < 0.01 && shown.w % 320 === 0, `arena screen ${shown.w}x${shown.h} is not a whole multiple of 320x200`);

  // Alone in the arena the view changes only when the player moves.
  let before = await still(page, "arena");
  await hold(page, "ArrowLeft", 700);
  await moved(page, "ArrowLeft did not turn the player (arena controls)", before);

  // Another module's metadata: new title, hint, aspect ratio and keys.
  const custom = {
    name: "custom", tick_rate: 35, max_players: 8, frame_divisor: 2, view_format: "indexed8",
    view_width: 320, view_height: 240, title: "Test Drive", hint: "Hold J to spin.",
    controls: [{ keys: ["KeyJ"], label: "spin", bit: 2 }, { keys: ["lower"], label: "bad key dropped", bit: 1 }],
  };
  check(await page.evaluate((j) => window.ludus.applyMeta(j), JSON.stringify(custom)), "applyMeta refused the metadata");
  const after = await page.evaluate(() => ({
    title: document.getElementById("match-title").textContent,
    doc: document.title,
    hint: document.getElementById("hint").textContent,
    keys: document.getElementById("keys").textContent,
    aspect: document.getElementById("screen").dataset.aspect,
    w: document.getElementById("screen").getBoundingClientRect().width,
    h: document.getElementById("screen").getBoundingClientRect().height,
    // The match view and the page's header (the lobby's games table, shown
    // beside it, lists other tests' games, some with "3 bots").
    body: `${document.getElementById("match").innerText}\n${document.querySelector("header")?.innerText ?? ""}`,
  }));
  check(after.title.startsWith("Test Drive") && after.doc.includes("Test Drive") && !after.doc.includes("Arena"), `custom title: ${JSON.stringify(after)}`);
  check(after.hint === "Hold J to spin.", `custom hint: ${after.hint}`);
  check(after.keys === "Keys: spin: J", `custom keys: ${after.keys}`);
  check(after.aspect === "320x240" && Math.abs(after.w / after.h - 4 / 3) < 0.01, `custom screen: ${after.aspect} ${after.w}x${after.h}`);
  check(!/\b3 bots\b|\bArena\b/.test(after.body), "arena-specific text left on the page");

  // The arena's keys are not this module's: ArrowLeft sends nothing and the view stays.
  before = await still(page, "custom");
  await hold(page, "ArrowLeft", 700);
  await page.waitForTimeout(800);
  check((await page.evaluate(canvasState)).world === before, "ArrowLeft still moved the player after the controls changed");
  check((await hook(page, "inputMask")) === 0, "ArrowLeft set input bits");
  // J is: bit 2 (turn left in the arena underneath).
  await page.keyboard.down("KeyJ");
  await until(page, 2000, "KeyJ did not set bit 2", async () => (await hook(page, "inputMask")) === 4);
  await page.waitForTimeout(700);
  await page.keyboard.up("KeyJ");
  await moved(page, "KeyJ (the declared control) did not turn the player", before);
  await page.screenshot({ path: join(artifacts, "web-meta.png") });
  return { source: meta.source, arena: shown, custom: { title: after.title, keys: after.keys, aspect: after.aspect } };
}

async function sessionFlow(page) {
  await open(page, url());
  check((await page.evaluate(() => document.title)) === "Lobby — Ludus", "lobby title");
  check((await page.inputValue("#tenant")) === "demo", "tenant field does not show the tenant");
  const id = await playAsGuest(page, "Ada");
  const slot = await until(page, 5000, "no slot", async () => ((await field(page, "slot")).match(/^\d+$/) ? field(page, "slot") : null));
  const device = await page.evaluate(() => sessionStorage.getItem("ludus.guest.demo"));
  check(device, "no per-tab identity in sessionStorage");
  check((await page.evaluate(() => localStorage.length)) === 0, "identity leaked into localStorage");

  // Reload: straight back into the match, same slot, no click.
  await page.reload({ waitUntil: "load" });
  await frameDrawn(page, "after reload");
  check((await route(page)) === `play:${id}`, `reload did not re-join: ${await route(page)}`);
  const slot2 = await until(page, 5000, "no slot after reload", async () => ((await field(page, "slot")).match(/^\d+$/) ? field(page, "slot") : null));
  check(slot2 === slot, `reload re-joined slot ${slot2}, was ${slot}`);

  // Back: the lobby; Forward: the match again.
  await page.goBack();
  await until(page, 5000, "Back did not show the lobby", async () => (await route(page)) === "lobby" && page.isVisible("#lobby"));
  check(await page.isHidden("#match"), "match still shown in the lobby");
  check((await page.inputValue("#name")) === "Ada", "the tab forgot its name");
  const drawn = await hook(page, "framesDrawn");
  await page.goForward();
  await until(page, 5000, "Forward did not show the match", async () => (await route(page)) === `play:${id}`);
  await frameDrawn(page, "after Forward", 0);
  check((await page.evaluate(() => document.title)).includes(id), "the page title does not name the game");

  // The invite link in another tab: a second player, asked for a name (empty).
  const invite = await page.getAttribute("#invite", "href");
  check(invite && !invite.includes("player="), `invite link: ${invite}`);
  const other = await context.newPage();
  watch(other, "invitee");
  await open(other, invite);
  await until(other, 5000, "the invite did not offer to join", async () => (await other.isVisible("#play")) && (await other.textContent("#lobby-note")).includes(id));
  check((await other.inputValue("#name")) === "", "the invite pre-filled the inviter's name");
  const otherDevice = await other.evaluate(() => sessionStorage.getItem("ludus.guest.demo"));
  check(otherDevice && otherDevice !== device, "the second tab has the first tab's identity");
  await other.fill("#name", "Bob");
  await other.getByRole("button", { name: "Play as guest" }).click();
  await frameDrawn(other, "invitee");
  const otherSlot = await until(other, 5000, "invitee has no slot", async () => ((await field(other, "slot")).match(/^\d+$/) ? field(other, "slot") : null));
  check(otherSlot !== slot, `both tabs play slot ${slot}`);
  check((await page.inputValue("#name").catch(() => "Ada")) === "Ada", "the first tab's name changed");
  await other.close();

  // The tenant field: an unknown tenant says so in words and goes into the URL.
  await page.click("#lobby-link");
  await until(page, 5000, "Back to lobby did not", async () => (await route(page)) === "lobby");
  // Another tenant gets a device id of its own: the device id is all a guest
  // signs in with, and a tenant's admin can read its accounts' ids.
  const guestLogins = [];
  const onRequest = (req) => {
    if (req.url().endsWith("/ludus.v1.AuthService/GuestLogin")) guestLogins.push(req.postDataBuffer() ?? Buffer.alloc(0));
  };
  page.on("request", onRequest);
  await page.fill("#tenant", "no-such-tenant");
  await page.getByRole("button", { name: "Play as guest" }).click();
  const note = await until(page, 10_000, "no sign-in error for an unknown tenant", async () => {
    const t = await page.textContent("#lobby-note");
    return /Could not sign in/.test(t) ? t : null;
  });
  page.off("request", onRequest);
  check(guestLogins.length > 0, "no GuestLogin to the other tenant");
  check(!guestLogins.some((b) => b.includes(device)), "the other tenant was sent this tab's device id of tenant demo");
  const otherTenantDevice = await page.evaluate(() => sessionStorage.getItem("ludus.guest.no-such-tenant"));
  check(otherTenantDevice && otherTenantDevice !== device, "no device id of the other tenant's own");
  check((await page.evaluate(() => sessionStorage.getItem("ludus.guest.demo"))) === device, "switching tenants lost tenant demo's guest");
  check(!/not_found|unauthenticated|invalid_argument/.test(note), `raw code shown: ${note}`);
  check(new URL(page.url()).searchParams.get("tenant") === "no-such-tenant", "the tenant is not in the URL");
  await page.screenshot({ path: join(artifacts, "web-session.png") });
  return { game: id, slot, otherSlot, tenantNote: note, framesBeforeBack: drawn };
}

async function statusFlow(page) {
  await page.setViewportSize({ width: 360, height: 740 });
  await open(page, url());
  const id = await playAsGuest(page);
  const s = await until(page, 10_000, "status fields never filled", async () => {
    const st = await statusText(page);
    return Number(st.fps) > 0 && /^\d+ ms$/.test(st.rtt) && Number(st.kbps) > 0 && /^(snapshots|pixels)$/.test(st.mode) && st.migrations === "0" ? st : null;
  });
  check((await hook(page, "rttMs")) > 0, "no Ping round trip measured");
  const line = await page.evaluate(() => {
    const l = document.querySelector("#status .line");
    const mids = [...l.children].map((c) => { const r = c.getBoundingClientRect(); return (r.top + r.bottom) / 2; });
    return { spread: Math.max(...mids) - Math.min(...mids), height: l.offsetHeight, lineHeight: parseFloat(getComputedStyle(l).lineHeight), width: l.getBoundingClientRect().right };
  });
  check(line.spread < 3 && line.height < line.lineHeight * 2, `status line wraps at 360 px: ${JSON.stringify(line)}`);
  check(line.width <= 360, `status line is wider than the screen: ${line.width}`);
  check(await page.isHidden("#status-details"), "details shown before asked");
  await page.getByRole("button", { name: "details" }).click();
  check(await page.isVisible("#status-details"), "details toggle did not show the details");
  check(/^\d+$/.test(await field(page, "slot")) && (await field(page, "node")) !== "—", "details lack slot or node");

  // Migration: the driver hands the game off to another node.
  console.log(`GAME ${id}`);
  const rl = createInterface({ input: process.stdin });
  await new Promise((resolve, reject) => {
    rl.once("line", (l) => (l.trim() === "moved" ? resolve() : reject(new Error(`driver said ${l}`))));
  });
  rl.close();
  const moved = await until(page, 15_000, "the migration never showed", async () => {
    const m = await field(page, "migrations");
    return /^1 \(last \d+ ms\)$/.test(m) ? m : null;
  });
  await frameDrawn(page, "after the migration", await hook(page, "framesDrawn"));
  await page.waitForTimeout(1500); // more statuses arrive; the last move stays shown
  check((await field(page, "migrations")) === moved, "the migration was wiped by a later status");
  await page.screenshot({ path: join(artifacts, "web-status.png") });
  return { game: id, status: s, line, migrations: moved };
}

// connectError is a Connect server-streaming answer that ends at once with
// an error (an end-of-stream envelope: flag 2, then the error as JSON).
function connectError(code, message) {
  const json = Buffer.from(JSON.stringify({ error: { code, message } }));
  const head = Buffer.alloc(5);
  head[0] = 2;
  head.writeUInt32BE(json.length, 1);
  return { status: 200, headers: { "content-type": "application/connect+proto" }, body: Buffer.concat([head, json]) };
}

async function errorsFlow(page) {
  // A tab that has played (so it re-joins links at once) opens a game that does not exist.
  await open(page, url({ bots: "0" }));
  await playAsGuest(page);
  await page.evaluate(() => (location.hash = "#game=no-such-game"));
  const msg = await until(page, 15_000, "no message for a missing game", async () => {
    const t = await page.textContent("#status .message");
    return t.includes("This game has ended or never existed.") ? t : null;
  });
  check(!/not_found/.test(msg), `raw code in: ${msg}`);
  check(await page.isHidden("#invite") && await page.isHidden("#spectate-link"), "links offered to a game that does not exist");
  check(await page.getByRole("button", { name: "Retry" }).count() === 0, "Retry offered for a game that does not exist");
  check(await page.getByRole("button", { name: "Back to lobby" }).count() === 1, "no way back to the lobby");
  await page.screenshot({ path: join(artifacts, "web-error.png") });
  await page.getByRole("button", { name: "Back to lobby" }).click();
  await until(page, 5000, "Back to lobby button did not", async () => (await route(page)) === "lobby");

  // Spectating a missing game: the same words, no Play link.
  await page.evaluate(() => (location.hash = "#spectate=no-such-game"));
  await until(page, 15_000, "no message when spectating a missing game", async () => (await page.textContent("#status .message")).includes("never existed"));
  check(await page.isHidden("#join-link"), "Play link offered for a missing game");

  // Streams that fail: bounded retries with backoff, then Retry.
  const streams = "**/ludus.v1.GameService/StreamFrames";
  await page.route(streams, (r) => r.abort("connectionrefused"));
  await page.evaluate(() => (location.hash = ""));
  await until(page, 5000, "lobby", async () => (await route(page)) === "lobby");
  await page.getByRole("button", { name: "Play as guest" }).click();
  await until(page, 10_000, "no retry message", async () => /Trying again in \d+ s \(1\/6\)/.test(await page.textContent("#status .message")));
  check(await page.getByRole("button", { name: "Retry" }).count() === 1, "no Retry button while retrying");
  const stopped = await until(page, 40_000, "retries never stopped", async () => {
    const t = await page.textContent("#status .message");
    return t.includes("Stopped after 6 tries") ? t : null;
  });
  check(!/unknown|unavailable:/.test(stopped), `raw code in: ${stopped}`);
  await page.waitForTimeout(1500);
  check((await field(page, "conn")) === "stopped", "the page kept retrying");
  const drawn = await hook(page, "framesDrawn");
  check(drawn === 0, "frames drawn while every stream failed");
  await page.unroute(streams);
  await page.getByRole("button", { name: "Retry" }).click();
  await frameDrawn(page, "after Retry");

  // A new stream refused because the game is over (the gateway's
  // FailedPrecondition "game … is ended") stops the page at once: no tries,
  // no Retry, a way back to the lobby.
  await page.evaluate(() => (location.hash = ""));
  await until(page, 5000, "lobby before the ended game", async () => (await route(page)) === "lobby");
  await page.route(streams, (r) => r.fulfill(connectError("failed_precondition", "game abcdef is ended")));
  await page.getByRole("button", { name: "Play as guest" }).click();
  const over = await until(page, 15_000, "no word that the game is over", async () => {
    const t = await page.textContent("#status .message");
    return t.includes("Game abcdef is ended.") ? t : null;
  });
  await page.waitForTimeout(1500);
  check(!/Trying again|Stopped/.test(await page.textContent("#status .message")), "the page retried a game that is over");
  check(await page.getByRole("button", { name: "Retry" }).count() === 0, "Retry offered for a game that is over");
  check(await page.getByRole("button", { name: "Back to lobby" }).count() === 1, "no way back to the lobby from a game that is over");
  await page.unroute(streams);

  // A stream refused because the player's seat was dropped (30 s without a
  // stream: "join the game before …"): the page takes a seat again and plays on.
  await page.getByRole("button", { name: "Back to lobby" }).click();
  await until(page, 5000, "lobby before the dropped seat", async () => (await route(page)) === "lobby");
  let joins = 0;
  page.on("request", (req) => { if (req.url().endsWith("/ludus.v1.GameService/JoinGame")) joins++; });
  let refused = false;
  await page.route(streams, (r) => {
    if (refused) return r.continue();
    refused = true;
    return r.fulfill(connectError("failed_precondition", "join the game before sending input or streaming its frames"));
  });
  await page.getByRole("button", { name: "Play as guest" }).click();
  await frameDrawn(page, "after taking the seat again");
  check(refused, "the stream was never refused");
  check(joins >= 2, `JoinGame called ${joins} time(s): the page never took its seat again`);
  await page.unroute(streams);

  // A stream refused for its ticket (it expired while the page slept): the
  // guest's session goes on with Refresh, not another GuestLogin (each starts a
  // session, and the backend limits them per account), and the page plays on.
  await page.evaluate(() => (location.hash = ""));
  await until(page, 5000, "lobby before the stale ticket", async () => (await route(page)) === "lobby");
  const auth = { guest: 0, refresh: 0 };
  page.on("request", (req) => {
    if (req.url().endsWith("/ludus.v1.AuthService/GuestLogin")) auth.guest++;
    if (req.url().endsWith("/ludus.v1.AuthService/Refresh")) auth.refresh++;
  });
  let stale = false;
  await page.route(streams, (r) => {
    if (stale) return r.continue();
    stale = true;
    return r.fulfill(connectError("unauthenticated", "ticket expired"));
  });
  await page.getByRole("button", { name: "Play as guest" }).click();
  await until(page, 15_000, "the stream was never refused for its ticket", async () => stale);
  await frameDrawn(page, "after renewing the ticket", (await page.evaluate(canvasState)).frames);
  check(auth.refresh >= 1 && auth.guest === 0, `renewed with ${auth.guest} GuestLogin and ${auth.refresh} Refresh calls, want Refresh only`);
  await page.unroute(streams);

  // A tenant's quota (the gateway's exact words): said as the server says it,
  // not "busy", and not tried again by itself, since live games do not end
  // because the page asks again; Retry stays for when one has.
  await page.evaluate(() => (location.hash = ""));
  await until(page, 5000, "lobby before the quota", async () => (await route(page)) === "lobby");
  const create = "**/ludus.v1.GameService/CreateGame";
  let creates = 0;
  await page.route(create, (r) => {
    creates++;
    return r.fulfill({
      status: 429,
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ code: "resource_exhausted", message: "tenant demo has 3 live games, its limit is 3: end a game or ask the operator to raise live_games" }),
    });
  });
  await page.getByRole("button", { name: "Play as guest" }).click();
  const quota = await until(page, 10_000, "no word of the quota", async () => {
    const t = await page.textContent("#status .message");
    return t.includes("its limit is 3") ? t : null;
  });
  await page.waitForTimeout(3500); // longer than the first two automatic retries would wait
  check(!/busy|Trying again/.test(await page.textContent("#status .message")), `a quota said as busy or retried: ${quota}`);
  check(creates === 1, `CreateGame called ${creates} times for a quota without a wait`);
  check(await page.getByRole("button", { name: "Retry" }).count() === 1, "no Retry for a quota");
  await page.unroute(create);

  // A stream refused for a limit that names no wait (too many open streams):
  // stopped at once with the server's words, no six tries.
  await page.getByRole("button", { name: "Back to lobby" }).click();
  await until(page, 5000, "lobby before the stream limit", async () => (await route(page)) === "lobby");
  let opened = 0;
  await page.route(streams, (r) => {
    opened++;
    return r.fulfill(connectError("resource_exhausted", "too many open streams: this account already has 4 open on this gateway (the limit is 4); close one first"));
  });
  await page.getByRole("button", { name: "Play as guest" }).click();
  await until(page, 15_000, "the stream limit was not said", async () =>
    (await page.textContent("#status .message")).includes("Too many open streams"));
  await page.waitForTimeout(2000);
  check((await field(page, "conn")) === "stopped", `the page did not stop at the stream limit: ${await field(page, "conn")}`);
  check(opened === 1, `${opened} streams opened against a limit without a wait`);
  await page.unroute(streams);

  // A join refused for a matched game: the node's words, not "not allowed".
  await page.getByRole("button", { name: "Back to lobby" }).click();
  await until(page, 5000, "lobby before the matched game", async () => (await route(page)) === "lobby");
  const joinCalls = "**/ludus.v1.GameService/JoinGame";
  await page.route(joinCalls, (r) => r.fulfill({
    status: 403,
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ code: "permission_denied",
      message: "game g1 is a matched game: only the players the matchmaker matched into it may join (find a match, or join a lobby game)" }),
  }));
  await page.getByRole("button", { name: "Play as guest" }).click();
  const denied = await until(page, 15_000, "the matched game's refusal was not said", async () => {
    const t = await page.textContent("#status .message");
    return t.includes("Game g1 is a matched game") ? t : null;
  });
  check(!denied.includes("not allowed"), `a matched game's refusal said as: ${denied}`);
  await page.unroute(joinCalls);

  // The 404 page: styled like the site, with a way home.
  const res = await page.goto(new URL("/no/such/page", base).href, { waitUntil: "load" });
  check(res?.status() === 404, `unknown path: HTTP ${res?.status()}`);
  const nf = await page.evaluate(() => ({
    h2: document.querySelector("h2")?.textContent,
    bg: getComputedStyle(document.body).backgroundColor,
    title: document.title,
  }));
  check(nf.h2 === "Page not found" && nf.bg === "rgb(16, 18, 23)", `404 page: ${JSON.stringify(nf)}`);
  await page.screenshot({ path: join(artifacts, "web-404.png") });
  await page.getByRole("link", { name: "Go to the lobby" }).click();
  await until(page, 5000, "the 404 link did not lead to the lobby", async () => (await page.isVisible("#play").catch(() => false)));
  return { missing: msg, stopped, over, notFound: nf };
}

async function phoneFlow(page) {
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: new URL(base).origin });
  await open(page, url({ bots: "0" }));
  await playAsGuest(page, "Phone");
  const pad = await until(page, 5000, "no touch controls on a touch screen", async () =>
    page.evaluate(() => {
      const t = document.getElementById("touch");
      return !t.hidden && t.querySelectorAll("button").length ? [...t.querySelectorAll("button")].map((b) => b.textContent) : null;
    }),
  );
  check(pad.join(",") === (await hook(page, "meta")).controls.map((c) => c.label).join(","), `touch buttons ${pad} are not the controls`);
  const fits = await page.evaluate(() => {
    const r = document.getElementById("screen").getBoundingClientRect();
    return r.right <= window.innerWidth && r.width > 0 ? r.width : 0;
  });
  check(fits, "the screen does not fit the phone");

  // Hold "turn left" with a finger: the player turns.
  const before = await still(page, "phone");
  const left = page.locator("#touch button", { hasText: "turn left" });
  const box = await left.boundingBox();
  check(box, "no turn left button");
  await left.dispatchEvent("pointerdown", { pointerId: 7, pointerType: "touch", isPrimary: true, button: 0, buttons: 1 });
  await until(page, 2000, "the touch button did not set its bit", async () => (await hook(page, "inputMask")) === 4);
  await page.waitForTimeout(700);
  await left.dispatchEvent("pointerup", { pointerId: 7, pointerType: "touch", isPrimary: true, button: 0, buttons: 0 });
  await until(page, 2000, "lifting the finger did not release the button", async () => (await hook(page, "inputMask")) === 0);
  await moved(page, "holding the touch button did not turn the player", before);
  await page.screenshot({ path: join(artifacts, "web-phone.png") });

  // Sharing: copy and QR of the spectator link.
  const spectate = await page.getAttribute("#spectate-link", "href");
  await page.locator('button[data-copy="spectate-link"]').click();
  await until(page, 3000, "Copy did not say Copied", async () => (await page.textContent('button[data-copy="spectate-link"]')) === "Copied");
  const clip = await page.evaluate(() => navigator.clipboard.readText());
  check(clip === spectate, `clipboard has ${clip}, want ${spectate}`);
  await page.locator('button[data-qr="spectate-link"]').click();
  const qr = await page.evaluate(() => {
    const svg = document.querySelector("#qr-code svg");
    return { label: svg?.getAttribute("aria-label") ?? "", parts: svg?.querySelectorAll("rect,path").length ?? 0, caption: document.getElementById("qr-caption").textContent };
  });
  check(qr.label === `QR code: ${spectate}` && qr.parts > 0 && qr.caption.endsWith(spectate), `QR: ${JSON.stringify(qr)}`);
  await page.screenshot({ path: join(artifacts, "web-share.png") });
  await page.locator('button[data-qr="spectate-link"]').click();
  check(await page.isHidden("#qr"), "QR button did not hide the code");

  // Full screen.
  await page.getByRole("button", { name: "Full screen" }).click();
  await until(page, 3000, "full screen did not start", () => page.evaluate(() => document.fullscreenElement?.id === "stage"));
  await page.getByRole("button", { name: "Exit full screen" }).click();
  await until(page, 3000, "full screen did not end", () => page.evaluate(() => document.fullscreenElement === null));

  // The lobby's games table at 360 px: nothing clipped, Join reachable.
  await page.setViewportSize({ width: 360, height: 740 });
  await page.click("#lobby-link");
  await until(page, 5000, "lobby", async () => (await route(page)) === "lobby");
  await until(page, 8000, "no games listed", async () => (await page.locator("#games tr").count()) > 0);
  const table = await page.evaluate(() => {
    const panel = document.getElementById("games-panel");
    const t = panel.querySelector("table");
    const join = panel.querySelector("#games a");
    const r = join?.getBoundingClientRect();
    return { tableW: t.scrollWidth, panelW: panel.clientWidth, joinRight: r?.right ?? 999, doc: document.documentElement.scrollWidth };
  });
  check(table.tableW <= table.panelW && table.joinRight <= 360 && table.doc <= 360, `games table clips at 360 px: ${JSON.stringify(table)}`);
  await page.screenshot({ path: join(artifacts, "web-lobby.png"), fullPage: true });
  return { pad, clipboard: clip, table };
}

await h.run(async () => {
  const phone = flow === "phone";
  context = await h.persistentContext("ludus-site-", phone
    ? { viewport: { width: 390, height: 844 }, hasTouch: true, isMobile: true, deviceScaleFactor: 2 }
    : { viewport: { width: 1280, height: 900 } });
  const page = await firstPage(context);
  watch(page, flow);
  const result = await { meta: metaFlow, session: sessionFlow, status: statusFlow, errors: errorsFlow, phone: phoneFlow }[flow](page);
  return { flow, ...result };
});
