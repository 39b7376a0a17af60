// The player site's account pages (#account, #leaderboards): keep a guest account
// by adding an email and password (AuthService.LinkEmail), sign in with an email
// (EmailLogin), sign out; the profile (ProgressionService.GetProgression: level,
// XP, wallet, inventory; recent matches, history.ts) and a game's leaderboards
// (GetLeaderboard), players by name.

import { Code, ConnectError } from "@connectrpc/connect";
import { trouble, type Session } from "./api";
import { counts, field, h, input, say, select, table, type Said } from "./dom";
import { LeaderboardOrder } from "./gen/ludus/v1/match_pb";
import { playerName, showRecentMatches } from "./history";

/** Words for an error of a sign-in form. */
function authWords(err: unknown): Said {
  const ce = ConnectError.from(err);
  const t = trouble(err, "tenant");
  const msg = ce.rawMessage;
  const text = ((): string => {
    switch (ce.code) {
      case Code.Unauthenticated:
        return /email or password/i.test(msg) ? "Wrong email or password." : "You are signed out; sign in again.";
      case Code.AlreadyExists:
        return "That email already belongs to an account: sign in with it instead.";
      case Code.ResourceExhausted:
        return `Too many tries: ${msg.replace(/^.*?(retry in)/i, "$1")}.`;
      case Code.InvalidArgument:
        return msg ? `${msg.charAt(0).toUpperCase()}${msg.slice(1)}.` : t.text;
      default:
        return t.text;
    }
  })();
  return { text, raw: t.raw, code: t.raw.split(":")[0] };
}

export class AccountPages {
  /** Bumped on every show, so a slow answer for an older view is dropped. */
  private gen = 0;

  constructor(
    private readonly session: Session,
    private readonly account: HTMLElement,
    private readonly boards: HTMLElement,
    private readonly defaultGame: () => string,
  ) {}

  hide(): void {
    this.gen++;
    this.account.hidden = this.boards.hidden = true;
  }

  async showAccount(): Promise<void> {
    const gen = ++this.gen;
    this.boards.hidden = true;
    this.account.hidden = false;
    document.title = "Account — Ludus";
    const s = this.session;
    const title = h("h2", { id: "account-title", tabindex: "-1" }, "Account");
    const profile = h("div", { id: "profile", "aria-live": "polite" }, h("p", { class: "note" }, "Loading…"));
    const msg = h("p", { class: "note", id: "account-note", role: "status" });
    const history = h("div", { id: "history", "aria-live": "polite" });
    this.account.replaceChildren(title, profile,
      h("h3", { id: "history-title" }, "Recent matches"), history, msg);
    title.focus();

    try {
      if (!s.loggedIn) await s.login();
      if (gen !== this.gen) return;
      void showRecentMatches(history, s.progression, () => gen !== this.gen);
      const { progression: p } = await s.progression.getProgression({});
      if (gen !== this.gen) return;
      const email = s.identity.email;
      profile.replaceChildren(h("dl", {},
        h("dt", {}, "Name"), h("dd", { id: "profile-name" }, s.displayName || "—"),
        h("dt", {}, "Account"), h("dd", { id: "profile-account" }, s.accountId),
        h("dt", {}, "Sign-in"), h("dd", { id: "profile-signin" }, email ? `email ${email}` : "guest (this tab only)"),
        h("dt", {}, "Level"), h("dd", { id: "profile-level" }, String(p?.level ?? 1)),
        h("dt", {}, "XP"), h("dd", { id: "profile-xp" }, `${p?.xp ?? 0n} (next level at ${p?.nextLevelXp ?? 0n})`),
        h("dt", {}, "Wallet"), h("dd", { id: "profile-wallet" }, counts(p?.currency ?? {})),
        h("dt", {}, "Inventory"), h("dd", { id: "profile-items" }, counts(p?.items ?? {})),
      ));
    } catch (err) {
      if (gen !== this.gen) return;
      const t = trouble(err, "tenant");
      say(profile, { text: `Could not load the profile: ${t.text}`, raw: t.raw }, "error");
    }
    if (gen !== this.gen) return;

    if (s.identity.email) {
      const out = h("button", { type: "button", id: "sign-out" }, "Sign out");
      out.addEventListener("click", () => {
        out.disabled = true;
        s.signOut().then(() => void this.showAccount(), (err: unknown) => {
          out.disabled = false;
          say(msg, authWords(err), "error");
        });
      });
      this.account.append(h("p", { class: "note" }, "Signed in with your email: any browser can sign in to this account."), out);
      return;
    }

    // A guest: keep the account with an email, or sign in to another one.
    const email = input("upgrade-email", { type: "email", autocomplete: "email", maxlength: "254", required: true });
    const pw = input("upgrade-password", { type: "password", autocomplete: "new-password", minlength: "8", maxlength: "128", required: true, "aria-describedby": "upgrade-help" });
    const save = h("button", { type: "submit" }, "Save account");
    const upgrade = h("form", { id: "upgrade-form", "aria-labelledby": "upgrade-title" }, field("Email", email), field("Password", pw), save);
    upgrade.addEventListener("submit", (e) => {
      e.preventDefault();
      save.disabled = true;
      say(msg, "Saving…");
      s.linkEmail(email.value.trim(), pw.value).then(
        () => {
          void this.showAccount().then(() => say(byIdIn(this.account, "account-note"), `Saved: sign in with ${s.identity.email} from any browser.`, "ok"));
        },
        (err: unknown) => {
          save.disabled = false;
          say(msg, { ...authWords(err), text: `Not saved: ${authWords(err).text}` }, "error");
        },
      );
    });

    const lemail = input("login-email", { type: "email", autocomplete: "username", maxlength: "254", required: true });
    const lpw = input("login-password", { type: "password", autocomplete: "current-password", maxlength: "128", required: true });
    const go = h("button", { type: "submit" }, "Sign in");
    const login = h("form", { id: "email-login-form", "aria-labelledby": "login-title" }, field("Email", lemail), field("Password", lpw), go);
    login.addEventListener("submit", (e) => {
      e.preventDefault();
      go.disabled = true;
      say(msg, "Signing in…");
      s.emailLogin(lemail.value.trim(), lpw.value).then(
        () => void this.showAccount(),
        (err: unknown) => {
          go.disabled = false;
          say(msg, { ...authWords(err), text: `Could not sign in: ${authWords(err).text}` }, "error");
        },
      );
    });

    this.account.append(
      h("h3", { id: "upgrade-title" }, "Keep this account"),
      h("p", { class: "note", id: "upgrade-help" }, "You play as a guest: the account lives in this tab only. Add an email and a password (8 characters or more) to keep it, with its level and items, and to sign in from anywhere."),
      upgrade,
      h("h3", { id: "login-title" }, "Sign in with email"),
      h("p", { class: "note" }, "Already saved an account? Sign in to it instead of this guest."),
      login,
    );
  }

  async showBoards(): Promise<void> {
    const gen = ++this.gen;
    this.account.hidden = true;
    this.boards.hidden = false;
    document.title = "Leaderboards — Ludus";
    const title = h("h2", { id: "boards-title", tabindex: "-1" }, "Leaderboards");
    const game = input("board-game", { maxlength: "64", required: true, value: this.defaultGame(), pattern: "[A-Za-z0-9_.\\-]+" });
    const stat = input("board-stat", { maxlength: "32", placeholder: "score", pattern: "[a-z][a-z0-9_]{0,31}" });
    const order = select("board-order", [[String(LeaderboardOrder.BEST), "best match"], [String(LeaderboardOrder.SUM), "all matches"]]);
    const around = input("board-around", { type: "checkbox" });
    const form = h("form", { id: "board-form", "aria-label": "choose a leaderboard" },
      field("Game", game), field("Stat", stat), field("Ranked by", order),
      h("div", { class: "field" }, around, h("label", { for: "board-around" }, "around me")),
      h("button", { type: "submit" }, "Show"));
    const box = h("div", { id: "board-box", "aria-live": "polite" });
    this.boards.replaceChildren(title, form, box);
    title.focus();

    const load = async (): Promise<void> => {
      const g = game.value.trim();
      say(box, "Loading…");
      try {
        if (!this.session.loggedIn) await this.session.login();
        const { entries } = await this.session.progression.getLeaderboard({
          query: { game: g, stat: stat.value.trim(), order: Number(order.value) as LeaderboardOrder, limit: 20 },
          aroundMe: around.checked,
        });
        if (gen !== this.gen) return;
        if (!entries.length) {
          say(box, around.checked
            ? `You are not on the ${g} leaderboard yet: finish a match of ${g} to get on it.`
            : `No one is on the ${g} leaderboard yet: finish a match of ${g} to be first.`);
          return;
        }
        const me = this.session.accountId;
        const t = table(`${g} leaderboard`, ["rank", "player", "best", "sum", "matches"], entries.map((e) => {
          const name = playerName(e.displayName, e.accountId);
          return [
            String(e.rank),
            e.accountId === me ? h("strong", { title: e.accountId }, `${name} (you)`) : h("span", { title: e.accountId }, name),
            String(e.best), String(e.sum), String(e.matches),
          ];
        }));
        t.querySelectorAll("tbody tr").forEach((tr, i) => {
          if (entries[i]?.accountId === me) tr.classList.add("me");
        });
        box.className = "";
        box.removeAttribute("title");
        box.replaceChildren(t);
      } catch (err) {
        if (gen !== this.gen) return;
        const code = ConnectError.from(err).code;
        const t = trouble(err);
        if (code === Code.NotFound && around.checked) {
          // The caller has no entry on this board.
          say(box, { text: `You are not on the ${g} leaderboard yet: finish a match of ${g} to get on it.`, raw: t.raw });
          return;
        }
        const why = code === Code.InvalidArgument ? authWords(err).text : code === Code.NotFound ? "There is no such leaderboard." : t.text;
        say(box, { text: `Could not load the leaderboard: ${why}`, raw: t.raw }, "error");
      }
    };
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      void load();
    });
    await load();
  }
}

function byIdIn(root: HTMLElement, id: string): HTMLElement {
  return root.querySelector<HTMLElement>(`#${id}`) ?? root;
}
