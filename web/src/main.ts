// Ludus browser client: lobby, play and spectate views.
//
// URL: ?tenant=&protocol=grpcweb&player=&module=&bots=&delivery=pixels|snapshots
// (all optional), then #game=ID (join that game after "Play as guest") or
// #spectate=ID / ?spectate=ID.

import { describeError, randomId, readConfig, savedName, Session } from "./api";
import { GameList } from "./games";
import { Match } from "./match";
import { StatusBar } from "./status";

function byId<T extends HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`page is missing #${id}`);
  return el as T;
}

const ui = {
  who: byId("who"),
  home: byId<HTMLAnchorElement>("home"),
  lobby: byId("lobby"),
  login: byId<HTMLFormElement>("login"),
  name: byId<HTMLInputElement>("name"),
  play: byId<HTMLButtonElement>("play"),
  lobbyNote: byId("lobby-note"),
  match: byId("match"),
  title: byId("match-title"),
  canvas: byId<HTMLCanvasElement>("view"),
  overlay: byId("overlay"),
  invite: byId<HTMLAnchorElement>("invite"),
  spectateLink: byId<HTMLAnchorElement>("spectate-link"),
  joinLink: byId<HTMLAnchorElement>("join-link"),
  lobbyLink: byId<HTMLAnchorElement>("lobby-link"),
  keys: byId("keys"),
  games: byId<HTMLTableSectionElement>("games"),
  gamesNote: byId("games-note"),
};

const cfg = readConfig(new URL(location.href));
const session = new Session(cfg);
const status = new StatusBar(byId("status"));
const list = new GameList(session, ui.games, ui.gamesNote);

type Route = { kind: "lobby" } | { kind: "play"; id: string } | { kind: "spectate"; id: string };

/** The hash wins over the query, so links like #game=ID work from a ?spectate= page. */
function routeOf(loc: Location): Route {
  const hash = new URLSearchParams(loc.hash.slice(1));
  const query = new URLSearchParams(loc.search);
  const spectate = hash.get("spectate");
  const game = hash.get("game");
  if (spectate) return { kind: "spectate", id: spectate };
  if (game) return { kind: "play", id: game };
  if (query.get("spectate")) return { kind: "spectate", id: query.get("spectate")! };
  return { kind: "lobby" };
}

/** This page's URL without ?spectate, with the given hash and query changes. */
function pageUrl(hash: string, params: Record<string, string> = {}): string {
  const u = new URL(location.href);
  u.searchParams.delete("spectate");
  for (const [k, v] of Object.entries(params)) u.searchParams.set(k, v);
  u.hash = hash;
  return u.href;
}

let shown: Route = { kind: "lobby" };
let match: Match | null = null;
/** Bumped by each view change, so a slow start of an older view gives up. */
let generation = 0;

function leaveView(): number {
  match?.close();
  match = null;
  return ++generation;
}

function showLobby(gameId = ""): void {
  leaveView();
  shown = gameId ? { kind: "play", id: gameId } : { kind: "lobby" };
  list.current = gameId;
  document.title = "Ludus";
  ui.lobby.hidden = false;
  ui.match.hidden = true;
  ui.lobbyNote.textContent = gameId ? `You will join game ${gameId}.` : "Starts a new arena match with 3 bots.";
  ui.name.value = savedName.get();
  ui.play.disabled = false;
  ui.play.focus();
}

function showMatch(route: Route & { kind: "play" | "spectate" }): void {
  shown = route;
  list.current = route.id;
  const spectate = route.kind === "spectate";
  document.title = spectate ? `Ludus — spectating ${route.id}` : `Ludus — game ${route.id}`;
  ui.title.textContent = route.id ? (spectate ? `Spectating ${route.id}` : `Game ${route.id}`) : "New game";
  ui.lobby.hidden = true;
  ui.match.hidden = false;
  ui.keys.hidden = spectate;
  ui.invite.hidden = spectate || !route.id;
  ui.spectateLink.hidden = spectate || !route.id;
  ui.joinLink.hidden = !spectate;
  if (route.id) {
    const hashId = encodeURIComponent(route.id);
    ui.invite.href = pageUrl(`game=${hashId}`, { player: randomId(6) });
    ui.spectateLink.href = pageUrl(`spectate=${hashId}`);
    ui.joinLink.href = pageUrl(`game=${hashId}`);
  }
}

async function play(gameId: string): Promise<void> {
  const gen = leaveView();
  showMatch({ kind: "play", id: gameId });
  status.set({ conn: "joining", game: gameId });
  status.say(gameId ? "Joining…" : "Creating a game…");
  try {
    if (!gameId) {
      const created = await session.game.createGame({ moduleName: cfg.module, bots: cfg.bots });
      if (gen !== generation) return;
      gameId = created.game?.gameId ?? "";
      if (!gameId) throw new Error("CreateGame returned no game");
      // Put the game in the URL (no hashchange event) so the URL can be shared.
      history.replaceState(null, "", pageUrl(`game=${encodeURIComponent(gameId)}`));
      showMatch({ kind: "play", id: gameId });
      void list.refresh();
    }
    const joined = await session.game.joinGame({ gameId });
    if (gen !== generation) return;
    match = new Match({
      session,
      gameId,
      spectate: false,
      canvas: ui.canvas,
      overlay: ui.overlay,
      status,
      viewFormat: joined.game?.viewFormat ?? "",
      slot: joined.slot,
      snapshotFormat: joined.game?.snapshotFormat ?? "",
      buildId: joined.game?.buildId ?? "",
    });
    ui.canvas.focus();
  } catch (err) {
    if (gen !== generation) return;
    status.set({ conn: "error" });
    status.say(`Could not ${gameId ? "join the game" : "create a game"}: ${describeError(err)}`, "error");
  }
}

async function spectate(gameId: string): Promise<void> {
  const gen = leaveView();
  showMatch({ kind: "spectate", id: gameId });
  status.set({ conn: "signing in", game: gameId });
  status.say("");
  try {
    if (!session.loggedIn) await session.login();
  } catch (err) {
    if (gen !== generation) return;
    status.set({ conn: "error" });
    status.say(`Could not sign in: ${describeError(err)}`, "error");
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
  match = new Match({
    session,
    gameId,
    spectate: true,
    canvas: ui.canvas,
    overlay: ui.overlay,
    status,
    viewFormat: info?.viewFormat,
    snapshotFormat: info?.snapshotFormat,
    buildId: info?.buildId,
  });
}

function route(): void {
  const r = routeOf(location);
  if (r.kind === shown.kind && (r.kind === "lobby" || (shown.kind !== "lobby" && r.id === shown.id))) return;
  if (r.kind === "spectate") void spectate(r.id);
  else if (r.kind === "play" && session.loggedIn) void play(r.id);
  else showLobby(r.kind === "play" ? r.id : "");
}

session.onChange = (err) => {
  const profile = cfg.profile ? ` · player ${cfg.profile}` : "";
  ui.who.textContent = err && !session.loggedIn
    ? `Sign-in failed: ${describeError(err)}`
    : `${session.displayName || "guest"} · ${cfg.tenant}${profile}`;
};

ui.login.addEventListener("submit", (e) => {
  e.preventDefault();
  const name = ui.name.value.trim();
  savedName.set(name);
  ui.play.disabled = true;
  ui.lobbyNote.textContent = "Signing in…";
  const r = routeOf(location);
  session.login(name).then(
    () => void play(r.kind === "play" ? r.id : ""),
    (err: unknown) => {
      ui.play.disabled = false;
      ui.lobbyNote.textContent = `Could not sign in: ${describeError(err)}`;
    },
  );
});

ui.home.href = ui.lobbyLink.href = pageUrl("");
window.addEventListener("hashchange", route);

const initial = routeOf(location);
if (initial.kind === "spectate") void spectate(initial.id);
else showLobby(initial.kind === "play" ? initial.id : "");
// Signs in in the background (same guest account every time) to list the games.
list.start();
