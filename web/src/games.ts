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
    cell(tr, g.moduleName);
    cell(tr, `${g.players}/${g.maxPlayers}`);
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
