// The profile's "Recent matches" (ProgressionService.ListMyMatches): the
// caller's finished matches, newest first, each with how it went, the caller's
// score and the other players by name. Also the names leaderboards show.

import { trouble, type ProgressionClient } from "./api";
import { h, say, shortId, table, when } from "./dom";
import { MatchOutcome, type MyMatch } from "./gen/ludus/v1/match_pb";

/** How many matches the profile lists (the API gives at most 50). */
export const RECENT_MATCHES = 20;

/**
 * A player's name as a table shows it: the display name the backend sends, or a
 * short guest form for an account without one (an older backend sends none).
 */
export function playerName(displayName: string, accountId: string): string {
  return displayName || `guest-${accountId.slice(-4)}`;
}

/** 1st, 2nd, 3rd, 4th, … 11th, 12th, 13th, … 21st. */
export function ordinal(n: number): string {
  const teen = n % 100 >= 11 && n % 100 <= 13;
  const suffix = teen ? "th" : ["th", "st", "nd", "rd"][n % 10] ?? "th";
  return `${n}${suffix}`;
}

const OUTCOME_CLASS: Partial<Record<MatchOutcome, string>> = {
  [MatchOutcome.WON]: "won",
  [MatchOutcome.DRAW]: "draw",
  [MatchOutcome.LOST]: "lost",
};

/** "won", "draw", "lost · 3rd", or "—" when the match has no places. */
export function outcomeText(m: MyMatch): string {
  switch (m.outcome) {
    case MatchOutcome.WON:
      return "won";
    case MatchOutcome.DRAW:
      return "draw";
    case MatchOutcome.LOST:
      return m.you?.place ? `lost · ${ordinal(m.you.place)}` : "lost";
    default:
      return "—";
  }
}

/** 0:42, 12:05, 1:02:03. */
export function duration(ms: bigint): string {
  const s = Number(ms / 1000n);
  const p = (n: number): string => String(n).padStart(2, "0");
  const hms = s >= 3600 ? `${Math.floor(s / 3600)}:${p(Math.floor(s / 60) % 60)}` : String(Math.floor(s / 60));
  return `${hms}:${p(s % 60)}`;
}

/** "Bob 12, guest-1a2b 3 +2 more"; "just you" for a match without other players. */
function others(m: MyMatch): string {
  if (!m.othersTotal) return "just you";
  const named = m.others.map((o) => `${playerName(o.displayName, o.accountId)} ${o.score}`).join(", ");
  const more = m.othersTotal - m.others.length;
  return more > 0 ? `${named} +${more} more` : named;
}

/**
 * Fills box with the caller's recent matches: a table (its developer columns
 * hidden on phones, the players wrap), or a note when there are none or the
 * call failed. stale() says the page moved on meanwhile.
 */
export async function showRecentMatches(box: HTMLElement, progression: ProgressionClient, stale: () => boolean): Promise<void> {
  say(box, "Loading…");
  try {
    const { matches } = await progression.listMyMatches({ limit: RECENT_MATCHES });
    if (stale()) return;
    if (!matches.length) {
      say(box, "No finished matches yet: finish a match and it shows here.");
      return;
    }
    const t = table("your recent matches", ["ended", "game", "result", "score", "players", "?played", "?match"], matches.map((m) => [
      when(m.endedAt),
      m.game,
      h("span", { class: `outcome ${OUTCOME_CLASS[m.outcome] ?? ""}`.trim() }, outcomeText(m)),
      String(m.you?.score ?? 0n),
      others(m),
      duration(m.you?.durationMs ?? 0n),
      shortId(m.matchId, 14),
    ]));
    t.querySelectorAll("tbody tr").forEach((tr, i) => {
      tr.setAttribute("data-match", matches[i]?.matchId ?? "");
      tr.children[4]?.classList.add("players");
    });
    box.className = "history";
    box.removeAttribute("title");
    box.replaceChildren(t);
  } catch (err) {
    if (stale()) return;
    const t = trouble(err);
    say(box, { text: `Could not load your matches: ${t.text}`, raw: t.raw }, "error");
  }
}
