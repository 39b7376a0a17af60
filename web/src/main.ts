// Ludus browser client: lobby, play and spectate views.
//
// URL: ?tenant=&protocol=grpcweb&player=&module=&bots=&delivery=pixels|snapshots
// (all optional), then #game=ID (join that game) or #spectate=ID / ?spectate=ID,
// or #account / #leaderboards (account.ts), or #party=CODE&mode=&size= (a party's
// invite link: the lobby's "Find match" joins that party, findmatch.ts).
// Views are history entries: Back from a match returns to the lobby, Forward goes
// back into the match (this tab re-joins it at once: its identity is kept in
// sessionStorage, see api.ts TabIdentity).

import { AccountPages } from "./account";
import { byId } from "./dom";
import { readConfig, Session, trouble, type Trouble } from "./api";
import { MatchFinder, type Party } from "./findmatch";
import { GameList } from "./games";
import { hooks } from "./hooks";
import { Match } from "./match";
import { keyHints, type ModuleMeta } from "./meta";
import { Share } from "./share";
import { StatusBar } from "./status";

const ui = {
  who: byId("who"),
  home: byId<HTMLAnchorElement>("home"),
  lobby: byId("lobby"),
  login: byId<HTMLFormElement>("login"),
  name: byId<HTMLInputElement>("name"),
  tenant: byId<HTMLInputElement>("tenant"),
  module: byId<HTMLInputElement>("module"),
  bots: byId<HTMLInputElement>("bots"),
  newGameFields: byId("new-game-fields"),
  play: byId<HTMLButtonElement>("play"),
  lobbyNote: byId("lobby-note"),
  match: byId("match"),
  title: byId("match-title"),
  hint: byId("hint"),
  stage: byId("stage"),
  screen: byId("screen"),
  canvas: byId<HTMLCanvasElement>("view"),
  overlay: byId("overlay"),
  touch: byId("touch"),
  invite: byId<HTMLAnchorElement>("invite"),
  shareInvite: byId("share-invite"),
  spectateLink: byId<HTMLAnchorElement>("spectate-link"),
  shareSpectate: byId("share-spectate"),
  joinLink: byId<HTMLAnchorElement>("join-link"),
  lobbyLink: byId<HTMLAnchorElement>("lobby-link"),
  fullscreen: byId<HTMLButtonElement>("fullscreen"),
  keys: byId("keys"),
  games: byId<HTMLTableSectionElement>("games"),
  gamesNote: byId("games-note"),
  account: byId("account"),
  boards: byId("boards"),
  findPanel: byId("find-panel"),
  find: byId<HTMLButtonElement>("find"),
};

const cfg = readConfig(new URL(location.href));
const session = new Session(cfg);
const status = new StatusBar(byId("status"));
const list = new GameList(session, ui.games, ui.gamesNote);
const share = new Share(byId("qr"), byId("qr-code"), byId("qr-caption"));
const partyShare = new Share(byId("party-qr"), byId("party-qr-code"), byId("party-qr-caption"));
const finder = new MatchFinder(session, {
  form: byId<HTMLFormElement>("find-form"),
  mode: byId<HTMLInputElement>("mode"),
  size: byId<HTMLSelectElement>("party-size"),
  find: ui.find,
  party: byId("party"),
  partyText: byId("party-text"),
  partyLink: byId<HTMLAnchorElement>("party-link"),
  search: byId("search"),
  searchText: byId("search-text"),
  cancel: byId<HTMLButtonElement>("cancel-search"),
  note: byId("find-note"),
}, {
  name: () => ui.name.value.trim(),
  inviteUrl: (p) => shareUrl(`party=${encodeURIComponent(p.code)}&mode=${encodeURIComponent(p.mode)}&size=${p.size}`),
  onFound: (f) => {
    const game = `game=${encodeURIComponent(f.gameId)}`;
    const there = f.gateway ? new URL(f.gateway, location.href) : null;
    // Only a web address: the field comes from the server, and a javascript:
    // URL (origin "null") would otherwise run here.
    if (there && (there.protocol === "https:" || there.protocol === "http:") && there.origin !== location.origin) {
      // Another region's gateway: this tab's session belongs to this one, so play there.
      there.search = new URL(shareUrl("")).search;
      there.hash = game;
      location.assign(there.href);
      return;
    }
    navigate(pageUrl(game));
  },
});
const pages = new AccountPages(session, ui.account, ui.boards, () => ui.module.value.trim() || cfg.module);

type Route =
  | { kind: "lobby" }
  | { kind: "play"; id: string }
  | { kind: "spectate"; id: string }
  | { kind: "account" }
  | { kind: "leaderboards" }
  | { kind: "party"; id: string; party: Party };
type GameRoute = Route & { kind: "play" | "spectate" };

/** The hash wins over the query, so links like #game=ID work from a ?spectate= page. */
function routeOf(loc: Location): Route {
  const hash = new URLSearchParams(loc.hash.slice(1));
  const query = new URLSearchParams(loc.search);
  const spectate = hash.get("spectate");
  const game = hash.get("game");
  if (spectate) return { kind: "spectate", id: spectate };
  if (game) return { kind: "play", id: game };
  const code = hash.get("party") ?? "";
  if (/^[A-Z0-9]{1,16}$/.test(code)) {
    const size = Number.parseInt(hash.get("size") ?? "", 10);
    const mode = hash.get("mode") ?? "";
    return { kind: "party", id: code, party: { code, mode: /^[A-Za-z0-9_-]{1,64}$/.test(mode) ? mode : "arena", size: size >= 2 && size <= 32 ? size : 2 } };
  }
  if (hash.has("account")) return { kind: "account" };
  if (hash.has("leaderboards")) return { kind: "leaderboards" };
  if (query.get("spectate")) return { kind: "spectate", id: query.get("spectate")! };
  return { kind: "lobby" };
}

/** This page's URL without ?spectate and ?player, with the given hash and query changes. */
function pageUrl(hash: string, params: Record<string, string> = {}): string {
  const u = new URL(location.href);
  u.searchParams.delete("spectate");
  for (const [k, v] of Object.entries(params)) u.searchParams.set(k, v);
  u.hash = hash;
  return u.href;
}

/**
 * A link for someone else: without what only matters to this tab (?player=, which
 * tabs no longer need as they have identities of their own, the new-game
 * settings ?module= and ?bots=, and ?mode= and ?region= of Find match).
 */
function shareUrl(hash: string): string {
  const u = new URL(pageUrl(hash));
  for (const k of ["player", "module", "bots", "mode", "region"]) u.searchParams.delete(k);
  return u.href;
}

/** A new history entry (Back returns to the current one), then shows it. */
function navigate(url: string): void {
  if (url !== location.href) history.pushState(null, "", url);
  route();
}

/** The view on screen; null before the first. */
let shown: Route | null = null;
let match: Match | null = null;
/** Bumped by each view change, so a slow start of an older view gives up. */
let generation = 0;
/** The metadata the open match is presented with (aspect ratio, title). */
let meta: ModuleMeta | null = null;

function leaveView(): number {
  pages.hide();
  finder.stop();
  partyShare.hide();
  match?.close();
  match = null;
  meta = null;
  share.hide();
  if (document.fullscreenElement) void document.exitFullscreen().catch(() => {});
  return ++generation;
}

const backToLobby = (): void => navigate(pageUrl(""));

function showLobby(gameId = "", party: Party | null = null): void {
  leaveView();
  shown = party ? { kind: "party", id: party.code, party } : gameId ? { kind: "play", id: gameId } : { kind: "lobby" };
  list.current = gameId;
  document.title = gameId ? `Join game ${gameId} — Ludus` : "Lobby — Ludus";
  ui.lobby.hidden = false;
  ui.match.hidden = true;
  ui.newGameFields.hidden = gameId !== "";
  ui.lobbyNote.textContent = gameId
    ? `You will join game ${gameId}.`
    : `Starts a new game of “${ui.module.value || cfg.module}”; bots fill empty places if the game has them.`;
  ui.name.value = session.identity.name;
  ui.play.disabled = false;
  ui.findPanel.hidden = gameId !== "";
  if (!gameId) finder.show(party);
  if (party) ui.find.focus();
  else ui.play.focus();
}

function showMatch(route: GameRoute): void {
  shown = route;
  list.current = route.id;
  const spectate = route.kind === "spectate";
  ui.lobby.hidden = true;
  ui.match.hidden = false;
  ui.keys.hidden = spectate;
  ui.touch.hidden = true;
  ui.hint.textContent = "";
  ui.keys.textContent = "";
  showLinks(route.id, spectate);
  present(null);
}

/** The match's links: invite and spectate (with copy and QR) while playing, join while spectating. */
function showLinks(id: string, spectate: boolean): void {
  ui.shareInvite.hidden = spectate || !id;
  ui.shareSpectate.hidden = spectate || !id;
  ui.joinLink.hidden = !spectate || !id;
  if (!id) return;
  const hashId = encodeURIComponent(id);
  ui.invite.href = shareUrl(`game=${hashId}`);
  ui.spectateLink.href = shareUrl(`spectate=${hashId}`);
  ui.joinLink.href = pageUrl(`game=${hashId}`);
}

/** The game no longer exists: offer nothing that leads to it. */
function gone(): void {
  ui.shareInvite.hidden = ui.shareSpectate.hidden = ui.joinLink.hidden = true;
  share.hide();
  ui.touch.hidden = true;
}

/** Title, hint, keys, touch buttons and screen size from the module's metadata. */
function present(m: ModuleMeta | null): void {
  meta = m;
  const id = shown && "id" in shown ? shown.id : "";
  const spectate = shown?.kind === "spectate";
  const name = m?.title || "Game";
  ui.title.textContent = spectate ? `${name} — spectating ${id}` : id ? `${name} — game ${id}` : `${name} — new game`;
  document.title = spectate ? `Spectating ${name} ${id} — Ludus` : `${name} ${id} — Ludus`;
  if (m) {
    ui.hint.textContent = m.hint;
    const hints = keyHints(m.controls);
    ui.keys.textContent = m.controls.length ? (hints ? `Keys: ${hints}` : "") : "This game declares no controls for this page.";
    ui.touch.hidden = spectate || !touchScreen() || m.controls.length === 0;
  }
  fitScreen();
}

function touchScreen(): boolean {
  return matchMedia("(pointer: coarse)").matches || navigator.maxTouchPoints > 0;
}

/**
 * Sizes the screen to the view's aspect ratio (the module's view_width × view_height,
 * else the canvas's): whole multiples of the view when it fits at least once, so
 * pixels stay square and crisp; smaller screens scale down.
 */
function fitScreen(): void {
  if (ui.match.hidden) return;
  const w = meta?.viewWidth || ui.canvas.width;
  const h = meta?.viewHeight || ui.canvas.height;
  const full = document.fullscreenElement === ui.stage;
  const pad = (ui.touch.hidden ? 0 : ui.touch.offsetHeight + 8) + (full ? ui.fullscreen.offsetHeight + 8 : 0);
  const availW = full ? window.innerWidth : Math.min(960, document.documentElement.clientWidth - 32);
  const reserve = full ? 0 : 230;
  const availH = Math.max(120, window.innerHeight - reserve - pad);
  let s = Math.min(availW / w, availH / h);
  if (s >= 1) s = Math.floor(s);
  ui.screen.style.width = `${Math.max(1, Math.floor(w * s))}px`;
  ui.screen.style.height = `${Math.max(1, Math.floor(h * s))}px`;
  ui.screen.dataset["aspect"] = `${w}x${h}`;
}
window.addEventListener("resize", fitScreen);
document.addEventListener("fullscreenchange", () => {
  ui.fullscreen.textContent = document.fullscreenElement ? "Exit full screen" : "Full screen";
  fitScreen();
});
new MutationObserver(fitScreen).observe(ui.canvas, { attributes: true, attributeFilter: ["width", "height"] });
ui.fullscreen.hidden = !document.fullscreenEnabled;
ui.fullscreen.addEventListener("click", () => {
  if (document.fullscreenElement) void document.exitFullscreen().catch(() => {});
  else void ui.stage.requestFullscreen().catch(() => {});
  ui.canvas.focus();
});

/** Says what went wrong, with Retry (when it may help) and Back to lobby. */
function fail(what: string, t: Trouble, retry: () => void): void {
  status.set({ conn: "error" });
  if (t.gone) gone();
  const actions = t.gone || !t.retry ? [] : [{ label: "Retry", run: retry }];
  actions.push({ label: "Back to lobby", run: backToLobby });
  status.say(`${what}: ${t.text}`, "error", actions, t.raw);
}

/** The longest wait a refusal may name for the page to try again by itself. */
const MAX_AUTO_WAIT_MS = 15_000;

/** Tries fn a few times with backoff while the errors are worth retrying. */
async function withRetries<T>(gen: number, fn: () => Promise<T>, tries = 3): Promise<T> {
  let delay = 1000;
  for (let i = 1; ; i++) {
    try {
      return await fn();
    } catch (err) {
      const t = trouble(err);
      // A wait longer than the player would sit through is theirs to decide (Retry).
      if (i >= tries || !t.retry || t.waitMs > MAX_AUTO_WAIT_MS || gen !== generation) throw err;
      status.say(`${t.text} Trying again (${i}/${tries - 1})…`, "error", [], t.raw);
      await new Promise((r) => setTimeout(r, Math.max(delay, t.waitMs)));
      delay *= 2;
      if (gen !== generation) throw err;
    }
  }
}

function openMatch(gameId: string, spectate: boolean, info: {
  viewFormat?: string; slot?: number; snapshotFormat?: string; buildId?: string;
}): Match {
  return new Match({
    session,
    gameId,
    spectate,
    canvas: ui.canvas,
    overlay: ui.overlay,
    status,
    pad: ui.touch,
    onMeta: (m) => present(m),
    onGone: gone,
    onLeave: backToLobby,
    ...info,
  });
}

async function play(gameId: string): Promise<void> {
  const gen = leaveView();
  showMatch({ kind: "play", id: gameId });
  status.set({ conn: "joining", game: gameId });
  status.say(gameId ? "Joining…" : "Creating a game…");
  const creating = !gameId;
  try {
    if (!session.loggedIn) await withRetries(gen, () => session.login());
  } catch (err) {
    if (gen === generation) fail("Could not sign in", trouble(err, "tenant"), () => void play(gameId));
    return;
  }
  try {
    if (gen !== generation) return;
    session.identity.signedIn = true;
    if (!gameId) {
      const bots = Number.parseInt(ui.bots.value, 10);
      const created = await withRetries(gen, () =>
        session.game.createGame({ moduleName: ui.module.value.trim() || cfg.module, bots: Number.isFinite(bots) && bots >= 0 ? bots : cfg.bots }),
      );
      if (gen !== generation) return;
      gameId = created.game?.gameId ?? "";
      if (!gameId) throw new Error("CreateGame returned no game");
      // A new history entry: Back returns to the lobby, Forward comes back here.
      history.pushState(null, "", pageUrl(`game=${encodeURIComponent(gameId)}`));
      showMatch({ kind: "play", id: gameId });
      void list.refresh();
    }
    const id = gameId;
    const joined = await withRetries(gen, () => session.game.joinGame({ gameId: id }));
    if (gen !== generation) return;
    match = openMatch(gameId, false, {
      viewFormat: joined.game?.viewFormat ?? "",
      slot: joined.slot,
      snapshotFormat: joined.game?.snapshotFormat ?? "",
      buildId: joined.game?.buildId ?? "",
    });
    ui.canvas.focus();
  } catch (err) {
    if (gen !== generation) return;
    const what = creating && !gameId ? "Could not start a game" : "Could not join the game";
    const t = trouble(err);
    if (creating && !gameId && t.gone) t.text = `There is no game called “${ui.module.value.trim() || cfg.module}” in this tenant.`;
    fail(what, t, () => void play(gameId));
  }
}

async function spectate(gameId: string): Promise<void> {
  const gen = leaveView();
  showMatch({ kind: "spectate", id: gameId });
  status.set({ conn: "signing in", game: gameId });
  status.say("");
  try {
    if (!session.loggedIn) await withRetries(gen, () => session.login());
  } catch (err) {
    if (gen !== generation) return;
    fail("Could not sign in", trouble(err, "tenant"), () => void spectate(gameId));
    return;
  }
  if (gen !== generation) return;
  // The game's entry says whether its module renders snapshots; unknown (not
  // listed, or the list failed) tries snapshots and falls back if refused.
  const info = await session.game.listGames({}).then(
    (res) => res.games.find((g) => g.gameId === gameId),
    () => undefined,
  );
  if (gen !== generation) return;
  match = openMatch(gameId, true, {
    viewFormat: info?.viewFormat,
    snapshotFormat: info?.snapshotFormat,
    buildId: info?.buildId,
  });
}

function route(): void {
  const r = routeOf(location);
  if (shown && r.kind === shown.kind && (!("id" in r) || ("id" in shown && r.id === shown.id))) {
    // Same view; a play route shown as the lobby ("Play as guest") stays as it is.
    return;
  }
  if (r.kind === "account" || r.kind === "leaderboards") {
    leaveView();
    shown = r;
    list.current = "";
    ui.lobby.hidden = ui.match.hidden = true;
    void (r.kind === "account" ? pages.showAccount() : pages.showBoards());
    return;
  }
  if (r.kind === "spectate") void spectate(r.id);
  else if (r.kind === "play" && (session.loggedIn || session.identity.signedIn)) void play(r.id);
  else if (r.kind === "party") showLobby("", r.party);
  else showLobby(r.kind === "play" ? r.id : "");
}

session.onChange = (err) => {
  const profile = cfg.profile ? ` · player ${cfg.profile}` : "";
  const email = session.identity.email;
  ui.who.textContent = err && !session.loggedIn
    ? `Could not sign in: ${trouble(err, "tenant").text}`
    : `${session.displayName || "guest"}${email ? ` · ${email}` : " (guest)"} · ${session.tenant}${profile}`;
};

/** Applies the tenant field: a new sign-in, the games of that tenant, ?tenant= in the URL. */
function applyTenant(): boolean {
  const t = ui.tenant.value.trim();
  if (!ui.tenant.checkValidity() || !t) {
    ui.tenant.reportValidity();
    return false;
  }
  if (t === session.tenant) return true;
  session.setTenant(t);
  history.replaceState(history.state, "", pageUrl(location.hash.slice(1), { tenant: t }));
  ui.home.href = ui.lobbyLink.href = pageUrl("");
  void list.refresh();
  return true;
}

ui.tenant.value = cfg.tenant;
ui.module.value = cfg.module;
byId<HTMLInputElement>("mode").value = new URLSearchParams(location.search).get("mode") || "arena";
ui.bots.value = String(cfg.bots);
ui.tenant.addEventListener("change", () => void applyTenant());
ui.module.addEventListener("input", () => {
  if (shown?.kind === "lobby") ui.lobbyNote.textContent = `Starts a new game of “${ui.module.value.trim() || cfg.module}”; bots fill empty places if the game has them.`;
});

ui.login.addEventListener("submit", (e) => {
  e.preventDefault();
  if (!applyTenant()) return;
  const name = ui.name.value.trim();
  session.identity.name = name;
  ui.play.disabled = true;
  ui.lobbyNote.textContent = "Signing in…";
  const r = routeOf(location);
  session.login(name).then(
    () => {
      session.identity.signedIn = true;
      void play(r.kind === "play" ? r.id : "");
    },
    (err: unknown) => {
      ui.play.disabled = false;
      ui.lobbyNote.textContent = `Could not sign in: ${trouble(err, "tenant").text}`;
    },
  );
});

for (const a of [ui.home, ui.lobbyLink]) {
  a.addEventListener("click", (e) => {
    if (e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey || e.altKey) return; // new tab: let the browser
    e.preventDefault();
    backToLobby();
  });
}
share.bind(document.querySelector("nav.links")!);
partyShare.bind(byId("share-party"));

ui.home.href = ui.lobbyLink.href = pageUrl("");
window.addEventListener("popstate", route);
window.addEventListener("hashchange", route);

hooks.route = () => (!shown ? "" : "id" in shown ? `${shown.kind}:${shown.id}` : shown.kind);
route();
// Signs in in the background (this tab's guest account) to list the games.
list.start();
