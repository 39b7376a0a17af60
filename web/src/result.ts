// The module's result at the end of a match (Status.result_json, docs/ABI.md
// "Result"), put into words for the page.

interface PlayerResult {
  slot?: number;
  name?: string;
  score?: number;
}

interface Result {
  winner?: number;
  players?: PlayerResult[];
}

/** Who won and the scores, or null when the module reported no result. */
export function describeResult(json: string, mySlot: number): { headline: string; scores: string } | null {
  if (!json) return null;
  let r: Result;
  try {
    r = JSON.parse(json) as Result;
  } catch {
    return null;
  }
  const players = (r.players ?? []).filter((p) => typeof p.slot === "number");
  if (players.length === 0) return null;
  const nameOf = (p: PlayerResult): string => (p.slot === mySlot ? "you" : p.name || `player ${(p.slot ?? 0) + 1}`);
  const winner = players.find((p) => p.slot === r.winner);
  const headline = winner
    ? winner.slot === mySlot
      ? `You win with ${winner.score ?? 0}!`
      : `${nameOf(winner)} wins with ${winner.score ?? 0}.`
    : "No winner.";
  const scores = [...players]
    .sort((a, b) => (b.score ?? 0) - (a.score ?? 0))
    .map((p) => `${nameOf(p)} ${p.score ?? 0}`)
    .join(" · ");
  return { headline, scores };
}
