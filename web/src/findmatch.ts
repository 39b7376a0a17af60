// "Find match" in the lobby (MatchmakingService): choose a mode, optionally make
// a party and share its invite link, measure the round trip to this gateway,
// then search on one FindMatch stream (band, elapsed time, queue size; Cancel
// closes the stream) until the server says found, timed out or cancelled. A
// found match is played as any other (main.ts joins it).

import { Code, ConnectError } from "@connectrpc/connect";
import { gatewayRegion, rememberRegion, trouble, type Session, type Trouble } from "./api";
import type { FindMatchResponse, MatchFound } from "./gen/ludus/v1/matchmaking_pb";
import { hooks } from "./hooks";

export interface FindUi {
  form: HTMLFormElement;
  mode: HTMLInputElement;
  size: HTMLSelectElement;
  find: HTMLButtonElement;
  /** The party box: its text and invite link (Copy and QR are share.ts's). */
  party: HTMLElement;
  partyText: HTMLElement;
  partyLink: HTMLAnchorElement;
  /** Shown while searching: what the server says, and Cancel. */
  search: HTMLElement;
  searchText: HTMLElement;
  cancel: HTMLButtonElement;
  note: HTMLElement;
}

/** A party: its code, the mode it queues for and its size (the creator included). */
export interface Party {
  code: string;
  mode: string;
  size: number;
}

export interface FinderOptions {
  /** The name typed in the lobby. */
  name: () => string;
  /** The invite link of a party (main.ts builds it like the other share links). */
  inviteUrl: (p: Party) => string;
  /** The match to join. */
  onFound: (f: MatchFound) => void;
}

/** Pings timed per search; the median is what FindMatch is told. */
const PINGS = 3;
const PING_TIMEOUT_MS = 3000;

/** "1:05" */
export function clock(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
}

/** What a search's server message means, in words. */
export function searchingText(mode: string, m: { band: number; elapsedMs: bigint; queueSize: number; partyJoined: number }, party: number): string {
  const parts = [`Searching for a match of “${mode}”`];
  if (party > 1 && m.partyJoined < party) {
    parts.push(`waiting for your party: ${m.partyJoined} of ${party} here`);
  } else {
    parts.push(`players within ±${Math.round(m.band)} rating`);
  }
  parts.push(clock(Number(m.elapsedMs)));
  parts.push(`${m.queueSize} ${m.queueSize === 1 ? "search" : "searches"} in the queue`);
  return parts.join(" · ");
}

/** Words for a FindMatch or CreateParty error. */
export function searchTrouble(err: unknown, mode: string, party: boolean): Trouble {
  const ce = ConnectError.from(err);
  const t = trouble(err);
  switch (ce.code) {
    case Code.NotFound:
      t.gone = false;
      t.text = party && /part/i.test(ce.rawMessage)
        ? "This party's code is unknown, has expired or was replaced by a newer party of its creator: make a new party."
        : `There is no matchmaking for “${mode}” in this tenant: try another mode.`;
      break;
    case Code.AlreadyExists:
      t.text = "This account is already searching (in another tab?): close that search first.";
      break;
    case Code.FailedPrecondition:
      if (party) t.text = "This party is full: every place in it is taken.";
      break;
  }
  return t;
}

export class MatchFinder {
  private abort: AbortController | null = null;
  /** A search closed by leaving the lobby says nothing. */
  private quiet = false;
  /** This tab's party: made here, or joined through an invite link. */
  private party: Party | null = null;
  /** The party came from an invite link: its mode and size are fixed. */
  private invited = false;

  constructor(
    private readonly session: Session,
    private readonly ui: FindUi,
    private readonly o: FinderOptions,
  ) {
    ui.form.addEventListener("submit", (e) => {
      e.preventDefault();
      void this.start();
    });
    ui.cancel.addEventListener("click", () => this.abort?.abort());
  }

  get searching(): boolean {
    return this.abort !== null;
  }

  /** Shows the form in the lobby; `invited`: a party from an invite link (mode and size fixed). */
  show(invited: Party | null): void {
    this.stop();
    if (this.invited && !invited) this.party = null; // back from an invite link to the plain lobby
    this.invited = invited !== null;
    if (invited) {
      this.party = invited;
      this.ui.mode.value = invited.mode;
      this.ui.size.value = String(invited.size);
      if (this.ui.size.value !== String(invited.size)) this.ui.size.append(new Option(`${invited.size} players`, String(invited.size), true, true));
    }
    // A party made here stays while its code is valid (15 minutes unused).
    this.ui.mode.disabled = this.ui.size.disabled = this.invited;
    this.ui.find.textContent = invited ? "Join the party" : "Find match";
    this.ui.find.disabled = false;
    this.ui.search.hidden = true;
    this.showParty();
    this.say(invited
      ? `You are invited to a party of ${invited.size} for “${invited.mode}”. Join it to search together: the party plays on one team, and the search starts when all ${invited.size} are here.`
      : "");
  }

  /** Closes a search without a word (the lobby is left). */
  stop(): void {
    if (!this.abort) return;
    this.quiet = true;
    this.abort.abort();
    this.abort = null;
  }

  private say(text: string, kind: "" | "ok" | "error" = "", raw = ""): void {
    this.ui.note.textContent = text;
    this.ui.note.className = `note ${kind}`.trim();
    this.ui.note.setAttribute("role", kind === "error" ? "alert" : "status");
    if (raw) this.ui.note.title = raw;
    else this.ui.note.removeAttribute("title");
  }

  private showParty(): void {
    const p = this.party;
    this.ui.party.hidden = !p;
    if (!p) return;
    this.ui.partyText.textContent = `Party ${p.code}: ${p.size} players for “${p.mode}”. Send the invite link to the others; they join with it.`;
    this.ui.partyLink.href = this.o.inviteUrl(p);
  }

  /** The median of a few Pings to this gateway, in ms. */
  private async measureRtt(signal: AbortSignal): Promise<number> {
    const times: number[] = [];
    let last: unknown = null;
    for (let i = 0; i < PINGS; i++) {
      const t0 = performance.now();
      try {
        const resp = await this.session.game.ping({ clientUnixNanos: BigInt(Date.now()) * 1_000_000n }, { signal, timeoutMs: PING_TIMEOUT_MS });
        times.push(performance.now() - t0);
        if (resp.region) rememberRegion(resp.region); // the region this gateway serves
      } catch (err) {
        if (signal.aborted) throw err;
        last = err;
      }
    }
    if (!times.length) throw last;
    times.sort((a, b) => a - b);
    return Math.min(10_000, Math.max(0, Math.round(times[times.length >> 1]!)));
  }

  private async start(): Promise<void> {
    if (this.abort) return;
    if (!this.ui.mode.checkValidity()) {
      this.ui.mode.reportValidity();
      return;
    }
    const mode = this.ui.mode.value.trim();
    const size = Math.max(1, Number.parseInt(this.ui.size.value, 10) || 1);
    const abort = new AbortController();
    this.abort = abort;
    this.quiet = false;
    this.ui.find.disabled = this.ui.mode.disabled = this.ui.size.disabled = true;
    this.ui.search.hidden = false;
    this.ui.cancel.focus();
    this.say("");
    hooks.search = "searching";
    hooks.found = null;
    const step = (text: string): void => {
      this.ui.searchText.textContent = text;
    };
    let outcome: { text: string; kind: "" | "ok" | "error"; raw?: string; state: string } | null = null;
    let found: MatchFound | null = null;
    try {
      const name = this.o.name();
      if (!this.session.loggedIn || name !== this.session.identity.name) {
        step("Signing in…");
        this.session.identity.name = name;
        await this.session.login(name);
      }
      this.session.identity.signedIn = true;
      if (size > 1 && (!this.party || this.party.mode !== mode || this.party.size !== size)) {
        step("Making a party…");
        const p = await this.session.matchmaking.createParty({ mode, size }, { signal: abort.signal });
        this.party = { code: p.code, mode, size };
        this.showParty();
      } else if (size === 1 && !this.invited) {
        this.party = null;
        this.showParty();
      }
      step("Measuring the round trip to the server…");
      const rtt = await this.measureRtt(abort.signal);
      const region = gatewayRegion();
      const party = size > 1 ? this.party : null;
      step(`Searching for a match of “${mode}” (${rtt} ms to ${region})…`);
      for (let attempt = 0; ; attempt++) {
        try {
          const stream = this.session.matchmaking.findMatch(
            { mode, partyCode: party?.code ?? "", partySize: party ? party.size : 1, rttMs: { [region]: rtt } },
            { signal: abort.signal },
          );
          for await (const m of stream) {
            const r = this.handle(m, mode, party?.size ?? 1);
            if (r === "found" && m.msg.case === "found") found = m.msg.value;
            if (r) {
              outcome = this.ending(m, mode);
              break;
            }
          }
          break;
        } catch (err) {
          // A ticket that expired while searching: sign in again and search again, once.
          if (attempt === 0 && !abort.signal.aborted && ConnectError.from(err).code === Code.Unauthenticated) {
            await this.session.login();
            continue;
          }
          throw err;
        }
      }
      outcome ??= { text: "The search ended without an answer from the server: search again.", kind: "error", state: "error" };
    } catch (err) {
      if (abort.signal.aborted) {
        outcome = this.quiet ? null : { text: "Search cancelled.", kind: "", state: "stopped" };
      } else {
        const t = searchTrouble(err, mode, size > 1);
        if (ConnectError.from(err).code === Code.NotFound && this.party && size > 1) {
          this.party = null; // an expired party code: a new party next time
          this.showParty();
        }
        outcome = { text: `Could not search: ${t.text}`, kind: "error", raw: t.raw, state: "error" };
      }
    }
    if (this.abort === abort) this.abort = null;
    if (this.quiet && abort.signal.aborted) return;
    this.ui.search.hidden = true;
    this.ui.find.disabled = false;
    this.ui.mode.disabled = this.ui.size.disabled = this.invited;
    if (outcome) {
      hooks.search = outcome.state;
      this.say(outcome.text, outcome.kind, outcome.raw ?? "");
      if (outcome.state !== "found") {
        this.ui.find.textContent = "Search again";
        this.ui.find.focus();
      }
    }
    if (found) this.o.onFound(found);
  }

  /** Shows a searching update; returns the end of the search it is, or "". */
  private handle(m: FindMatchResponse, mode: string, party: number): string {
    switch (m.msg.case) {
      case "searching":
        this.ui.searchText.textContent = searchingText(mode, m.msg.value, party);
        return "";
      case "found":
        return "found";
      case "timedOut":
        return "timed_out";
      case "cancelled":
        return "cancelled";
      default:
        return "";
    }
  }

  private ending(m: FindMatchResponse, mode: string): { text: string; kind: "" | "ok" | "error"; state: string } {
    const why = (r: string): string => (r ? `: ${r}` : "");
    switch (m.msg.case) {
      case "found": {
        const f = m.msg.value;
        hooks.found = { gameId: f.gameId, team: f.team, slot: f.slot, region: f.region };
        const mates = f.teammates.length > 1 ? ` with ${f.teammates.length - 1} teammate${f.teammates.length > 2 ? "s" : ""}` : "";
        return { text: `Match found: game ${f.gameId}${f.region ? ` in ${f.region}` : ""}, team ${f.team + 1}${mates}. Joining…`, kind: "ok", state: "found" };
      }
      case "timedOut":
        return { text: `No match of “${mode}” was found in time${why(m.msg.value.reason)}. Search again, or try another mode.`, kind: "error", state: "timed_out" };
      case "cancelled":
        return { text: `The search was called off${why(m.msg.value.reason)}. Search again when everyone is ready.`, kind: "error", state: "cancelled" };
      default:
        return { text: "", kind: "", state: "error" };
    }
  }
}
