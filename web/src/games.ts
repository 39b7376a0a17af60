// The list of the tenant's running games, refreshed every few seconds.

import { trouble, type Session } from "./api";
import type { GameInfo } from "./gen/ludus/v1/game_pb";

const REFRESH_MS = 3000;

export class GameList {
  private timer = 0;
  private busy = false;
  /** Game shown on the page, highlighted in the list. */
  current = "";

  constructor(
    private readonly session: Session,
    private readonly body: HTMLTableSectionElement,
    private readonly note: HTMLElement,
  ) {}

  start(): void {
    if (this.timer) return;
    void this.refresh();
    this.timer = window.setInterval(() => {
      if (!document.hidden) void this.refresh();
    }, REFRESH_MS);
  }

  async refresh(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    let signingIn = false;
    try {
      if (!this.session.loggedIn) {
        signingIn = true;
        await this.session.login();
        signingIn = false;
      }
      const res = await this.session.game.listGames({});
      this.render(res.games);
    } catch (err) {
      const t = trouble(err, signingIn ? "tenant" : "game");
      this.note.textContent = `Could not list the games: ${t.text}`;
      this.note.title = t.raw;
    } finally {
      this.busy = false;
    }
  }

  private render(games: GameInfo[]): void {
    this.note.textContent = games.length ? "" : "No games running. Play to start one.";
    this.body.replaceChildren(...games.map((g) => this.row(g)));
  }

  private row(g: GameInfo): HTMLTableRowElement {
    const tr = document.createElement("tr");
    if (g.gameId === this.current) tr.className = "current";
    const id = cell(tr, g.gameId.length > 12 ? `${g.gameId.slice(0, 10)}…` : g.gameId);
    id.title = g.gameId;
    id.className = "id";
    cell(tr, gameName(g, Date.now())).className = "name";
    const seats = cell(tr, seatsText(g));
    seats.className = "seats";
    if (g.maxPlayers > 0) seats.title = `${g.players + g.bots} of ${g.maxPlayers} places taken`;
    cell(tr, String(g.tick)).className = "opt";
    cell(tr, g.state).className = "opt";
    cell(tr, g.nodeId).className = "opt";
    const actions = cell(tr, "");
    // Only games that are still running are offered: an ended game has nothing to join.
    if (g.state === "running" || g.state === "") {
      const id = encodeURIComponent(g.gameId);
      actions.append(link("Join", `#game=${id}`), " ", link("Watch", `#spectate=${id}`));
    } else {
      actions.textContent = g.state;
    }
    return tr;
  }
}

/** "2 min ago"; "just now" under a minute. */
export function age(createdMs: number, now: number): string {
  const min = Math.floor((now - createdMs) / 60_000);
  if (min < 1) return "just now";
  if (min < 60) return `${min} min ago`;
  const h = Math.floor(min / 60);
  if (h < 48) return `${h} h ago`;
  return `${Math.floor(h / 24)} days ago`;
}

/** "arena · ada's game · 2 min ago": the module, then the host and age when the server says them. */
export function gameName(g: Pick<GameInfo, "moduleName" | "hostName" | "createdAtUnixMs">, now: number): string {
  const parts = [g.moduleName];
  const host = g.hostName.trim();
  if (host) parts.push(`${host}${/s$/i.test(host) ? "’" : "’s"} game`);
  const created = Number(g.createdAtUnixMs);
  if (created > 0) parts.push(age(created, now));
  return parts.join(" · ");
}

/** "2 players + 3 bots" (bots only when there are some). */
export function seatsText(g: Pick<GameInfo, "players" | "bots">): string {
  const people = `${g.players} player${g.players === 1 ? "" : "s"}`;
  return g.bots > 0 ? `${people} + ${g.bots} bot${g.bots === 1 ? "" : "s"}` : people;
}

function cell(tr: HTMLTableRowElement, text: string): HTMLTableCellElement {
  const td = tr.insertCell();
  td.textContent = text;
  return td;
}

function link(text: string, href: string): HTMLAnchorElement {
  const a = document.createElement("a");
  a.textContent = text;
  a.href = href;
  return a;
}
