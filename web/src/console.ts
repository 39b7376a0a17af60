// The studio console at /console (dist/console.js, a bundle of its own so the
// player page does not carry it): signed in with a tenant's API key and, for the
// fleet, the operator key; both kept in this tab's sessionStorage only.
//
// Sections are history entries (/console#games, #modules, #keys, #webhooks,
// #results, #nodes, #tenants): Back and Forward move between them, a reload
// stays. Every RPC error is said in words (`words`), its raw "code: message" on
// hover.

import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { AdminService, ResultRuleKind, type ResultRule } from "./gen/ludus/v1/admin_pb";
import { FleetService } from "./gen/ludus/v1/fleet_pb";
import { LeaderboardOrder } from "./gen/ludus/v1/match_pb";
import { codeName } from "./api";
import { button, bytes, field, h, input, say, secretBox, select, shortId, table, when, type Said } from "./dom";

type Admin = Client<typeof AdminService>;
type Fleet = Client<typeof FleetService>;

function byId<T extends HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`page is missing #${id}`);
  return el as T;
}

const ui = {
  who: byId("who"),
  signout: byId<HTMLButtonElement>("signout"),
  signin: byId("signin"),
  form: byId<HTMLFormElement>("signin-form"),
  tenant: byId<HTMLInputElement>("tenant"),
  key: byId<HTMLInputElement>("key"),
  operator: byId<HTMLInputElement>("operator"),
  signinButton: byId<HTMLButtonElement>("signin-button"),
  signinNote: byId("signin-note"),
  nav: byId("sections"),
  view: byId("view"),
  title: byId("view-title"),
  body: byId("view-body"),
  confirm: byId<HTMLDialogElement>("confirm"),
  confirmText: byId("confirm-text"),
  confirmOk: byId<HTMLButtonElement>("confirm-ok"),
};

// ---- errors in words ----

function sentence(s: string): string {
  const t = s.trim();
  if (!t) return "";
  return `${t.charAt(0).toUpperCase()}${t.slice(1)}${/[.!?]$/.test(t) ? "" : "."}`;
}

/** What an RPC error means for the person at the console. */
export function words(err: unknown): Said {
  const ce = ConnectError.from(err);
  const code = codeName(ce.code);
  const raw = `${code}: ${ce.rawMessage || "(no message)"}`;
  const msg = ce.rawMessage;
  const t = (text: string): Said => ({ text, raw, code });
  switch (ce.code) {
    case Code.Unauthenticated:
      return t("This key is not valid: it is unknown or was revoked. Sign out and sign in with a valid key.");
    case Code.PermissionDenied:
      return t(`This key may not do that. ${sentence(msg)}`.trim());
    case Code.InvalidArgument:
      return t(sentence(msg) || "The server refused the request as invalid.");
    case Code.NotFound:
      return t(sentence(msg) || "Not found.");
    case Code.FailedPrecondition:
      return t(sentence(msg) || "Not possible right now.");
    case Code.ResourceExhausted:
      return t(msg ? `Too much: ${sentence(msg)}` : "The server is busy; try again in a moment.");
    case Code.Aborted:
      return t(`It did not complete: ${sentence(msg) || "interrupted."}`);
    case Code.Unavailable:
    case Code.Unknown:
      return t("The server cannot be reached right now; try again in a moment.");
    case Code.DeadlineExceeded:
      return t("The server took too long to answer; try again.");
    case Code.Unimplemented:
      return t("This server does not offer that (an older version of Ludus?).");
    default:
      return t("Something went wrong on the server; its log says more.");
  }
}

function fail(note: HTMLElement, what: string, err: unknown): void {
  const w = words(err);
  say(note, { ...w, text: `${what}: ${w.text}` }, "error");
}

// ---- sign-in state (sessionStorage only) ----

interface Keys {
  tenant: string;
  /** The tenant's API key ("" when signed in with the operator key only). */
  key: string;
  /** The operator key ("" when not given). */
  operator: string;
  /** The tenant's id, known when the operator key is given (ListTenants). */
  tenantId: string;
}

const STORE = "ludus.console";

function loadKeys(): Keys | null {
  try {
    const v = JSON.parse(sessionStorage.getItem(STORE) ?? "null") as Partial<Keys> | null;
    if (!v || typeof v.tenant !== "string" || (!v.key && !v.operator)) return null;
    return { tenant: v.tenant, key: v.key ?? "", operator: v.operator ?? "", tenantId: v.tenantId ?? "" };
  } catch {
    return null;
  }
}

function saveKeys(k: Keys | null): void {
  try {
    if (k) sessionStorage.setItem(STORE, JSON.stringify(k));
    else sessionStorage.removeItem(STORE);
  } catch {
    // storage disabled: the keys live as long as the page
  }
}

function bearer(key: () => string): Interceptor {
  return (next) => (req) => {
    const k = key();
    if (k) req.header.set("Authorization", `Bearer ${k}`);
    return next(req);
  };
}

let keys: Keys | null = null;
const tenantTransport = createConnectTransport({ baseUrl: location.origin, useBinaryFormat: true, interceptors: [bearer(() => keys?.key ?? "")] });
const operatorTransport = createConnectTransport({ baseUrl: location.origin, useBinaryFormat: true, interceptors: [bearer(() => keys?.operator ?? "")] });
const admin: Admin = createClient(AdminService, tenantTransport);
const opAdmin: Admin = createClient(AdminService, operatorTransport);
const fleet: Fleet = createClient(FleetService, operatorTransport);

/** Whether `key` is the operator key (ListTenants answers) or a tenant's (ListModules does). */
async function probe(key: string): Promise<"operator" | "tenant"> {
  const tr = createConnectTransport({ baseUrl: location.origin, useBinaryFormat: true, interceptors: [bearer(() => key)] });
  const c = createClient(AdminService, tr);
  try {
    await c.listTenants({});
    return "operator";
  } catch (err) {
    if (ConnectError.from(err).code !== Code.PermissionDenied) throw err;
  }
  await c.listModules({});
  return "tenant";
}

async function signIn(tenant: string, first: string, second: string): Promise<Keys> {
  const k: Keys = { tenant, key: "", operator: "", tenantId: "" };
  for (const key of [first, second]) {
    if (!key) continue;
    const kind = await probe(key);
    if (kind === "operator") k.operator = key;
    else if (k.key) throw new Error("both keys are tenant keys: give the operator key in the second field");
    else k.key = key;
  }
  if (k.operator) {
    const { tenants } = await createClient(AdminService, createConnectTransport({
      baseUrl: location.origin, useBinaryFormat: true, interceptors: [bearer(() => k.operator)],
    })).listTenants({});
    k.tenantId = tenants.find((t) => t.slug === tenant)?.id ?? "";
  }
  return k;
}

ui.form.addEventListener("submit", (e) => {
  e.preventDefault();
  const tenant = ui.tenant.value.trim();
  ui.signinButton.disabled = true;
  say(ui.signinNote, "Checking the keys…");
  signIn(tenant, ui.key.value.trim(), ui.operator.value.trim()).then(
    (k) => {
      keys = k;
      saveKeys(k);
      ui.key.value = ui.operator.value = "";
      ui.signinButton.disabled = false;
      say(ui.signinNote, "");
      navigate(k.key ? "games" : "nodes", true);
    },
    (err: unknown) => {
      ui.signinButton.disabled = false;
      if (err instanceof ConnectError) fail(ui.signinNote, "Could not sign in", err);
      else say(ui.signinNote, `Could not sign in: ${sentence(String((err as Error).message ?? err))}`, "error");
      ui.key.focus();
    },
  );
});

ui.signout.addEventListener("click", () => {
  keys = null;
  saveKeys(null);
  stopTimers();
  history.pushState(null, "", "/console");
  route();
});

// ---- sections and routing ----

type Needs = "tenant" | "operator";

interface Section {
  id: string;
  title: string;
  needs: Needs;
  render: (body: HTMLElement) => void;
}

const SECTIONS: Section[] = [
  { id: "games", title: "Live games", needs: "tenant", render: gamesSection },
  { id: "modules", title: "Modules", needs: "tenant", render: modulesSection },
  { id: "keys", title: "API keys", needs: "tenant", render: keysSection },
  { id: "webhooks", title: "Webhooks", needs: "tenant", render: webhooksSection },
  { id: "results", title: "Results", needs: "tenant", render: resultsSection },
  { id: "nodes", title: "Nodes", needs: "operator", render: nodesSection },
  { id: "tenants", title: "Tenants", needs: "operator", render: tenantsSection },
];

let timers: number[] = [];
function stopTimers(): void {
  for (const t of timers) clearInterval(t);
  timers = [];
}

/** Refreshes every `ms` while the section is shown and the tab visible. */
function every(ms: number, fn: () => void): void {
  timers.push(window.setInterval(() => {
    if (!document.hidden) fn();
  }, ms));
}

function navigate(id: string, replace = false): void {
  const url = `/console#${id}`;
  if (replace) history.replaceState(null, "", url);
  else if (location.pathname + location.hash !== url) history.pushState(null, "", url);
  route();
}

function route(): void {
  stopTimers();
  if (!keys) {
    document.title = "Sign in — Ludus console";
    ui.signin.hidden = false;
    ui.nav.hidden = ui.view.hidden = ui.signout.hidden = true;
    ui.who.textContent = "";
    ui.tenant.value ||= new URLSearchParams(location.search).get("tenant") || "demo";
    ui.tenant.focus();
    return;
  }
  const k = keys;
  ui.signin.hidden = true;
  ui.nav.hidden = ui.view.hidden = ui.signout.hidden = false;
  const roles = [k.key ? `tenant ${k.tenant}` : "", k.operator ? "operator" : ""].filter(Boolean).join(" · ");
  ui.who.textContent = `Signed in: ${roles}`;
  const want = location.hash.slice(1);
  const s = SECTIONS.find((x) => x.id === want) ?? SECTIONS.find((x) => (x.needs === "tenant" ? k.key : k.operator)) ?? SECTIONS[0]!;
  ui.nav.replaceChildren(...SECTIONS.map((x) => {
    const a = h("a", { href: `/console#${x.id}`, "aria-current": x === s ? "page" : undefined }, x.title);
    a.addEventListener("click", (e) => {
      if (e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey || e.altKey) return;
      e.preventDefault();
      navigate(x.id);
    });
    return a;
  }));
  document.title = `${s.title} — Ludus console`;
  ui.title.textContent = s.title;
  ui.body.replaceChildren();
  const missing = s.needs === "tenant" ? !k.key : !k.operator;
  if (missing) {
    ui.body.append(h("p", { class: "note empty" }, s.needs === "operator"
      ? `${s.title} belong to the operator: sign out, then sign in with the operator key as well.`
      : `${s.title} belong to a tenant: sign out, then sign in with the tenant's API key as well.`));
    return;
  }
  s.render(ui.body);
}

window.addEventListener("popstate", route);
window.addEventListener("hashchange", route);

/** Asks before something that cannot be undone; resolves true on OK. */
function confirmAction(text: string, ok: string): Promise<boolean> {
  ui.confirmText.textContent = text;
  ui.confirmOk.textContent = ok;
  ui.confirm.returnValue = "";
  ui.confirm.showModal();
  ui.confirmOk.focus();
  return new Promise((resolve) => {
    ui.confirm.addEventListener("close", () => resolve(ui.confirm.returnValue === "ok"), { once: true });
  });
}

/** A note for a section's messages, placed in `parent`. */
function note(parent: HTMLElement, id: string): HTMLParagraphElement {
  const p = h("p", { class: "note", id, role: "status" });
  parent.append(p);
  return p;
}

/**
 * Runs a list call and shows its result in `box`, or the error in words. A
 * refresh keeps the keyboard focus on the same control (by its accessible name),
 * so periodic refreshes do not throw a keyboard user back to the top.
 */
async function load(box: HTMLElement, what: string, fn: () => Promise<Node>): Promise<void> {
  let next: Node;
  try {
    next = await fn();
  } catch (err) {
    const p = h("p", { class: "note" });
    fail(p, `Could not load ${what}`, err);
    next = p;
  }
  const active = document.activeElement;
  const focused = active && box.contains(active) ? active.getAttribute("aria-label") ?? active.textContent : null;
  box.replaceChildren(next);
  if (focused) {
    const same = [...box.querySelectorAll<HTMLElement>("a, button")].find((e) => (e.getAttribute("aria-label") ?? e.textContent) === focused);
    (same ?? box.querySelector<HTMLElement>(".scroll") ?? box).focus();
  }
}

function playerSite(hash: string): string {
  const u = new URL("/", location.origin);
  if (keys && keys.tenant !== "demo") u.searchParams.set("tenant", keys.tenant);
  u.hash = hash;
  return u.href;
}

// ---- live games ----

function gamesSection(body: HTMLElement): void {
  const k = keys!;
  const result = note(body, "games-note");
  const box = h("div", { id: "games-box" });
  const refresh = button("Refresh", () => void render(), { class: "small" });
  body.append(h("div", { class: "toolbar" }, refresh), box);
  if (!k.operator) body.append(h("p", { class: "note" }, "Moving a game to another node needs the operator key."));
  else if (!k.tenantId) body.append(h("p", { class: "note" }, `The operator key knows no tenant “${k.tenant}”, so games cannot be moved from here.`));
  body.append(h("p", { class: "note" }, "Ending a game from the console is not offered: the API has no call for it yet."));

  const render = (): Promise<void> => load(box, "the games", async () => {
    const { games } = await admin.listGames({});
    if (!games.length) {
      return h("p", { class: "note empty" }, "No games running. Games appear here when players start them: ",
        h("a", { href: playerSite(""), target: "_blank", rel: "noopener" }, "open the player site"), " and play.");
    }
    return table("live games", ["game", "module", "players", "tick", "node", "?state", "actions"], games.map((g) => {
      const actions = h("span", { class: "actions" },
        h("a", { href: playerSite(`spectate=${encodeURIComponent(g.gameId)}`), target: "_blank", rel: "noopener", "aria-label": `spectate game ${g.gameId}` }, "Spectate"));
      if (k.operator && k.tenantId && g.state === "running") {
        actions.append(button("Hand off", (b) => void handoff(b, g.gameId), { class: "small", "aria-label": `hand off game ${g.gameId} to another node` }));
      }
      return [shortId(g.gameId), g.moduleName, `${g.players}/${g.maxPlayers}`, String(g.tick), g.nodeId || "—", g.state, actions];
    }));
  });

  const handoff = async (b: HTMLButtonElement, id: string): Promise<void> => {
    b.disabled = true;
    say(result, `Moving game ${id} to another node…`);
    try {
      const r = await fleet.handoffGame({ tenantId: k.tenantId, gameId: id, targetNodeId: "" });
      say(result, `Moved game ${id} from ${r.fromNodeId} to ${r.toNodeId}; its players keep playing.`, "ok");
    } catch (err) {
      fail(result, `Could not move game ${id}`, err);
    }
    b.disabled = false;
    void render();
  };

  void render();
  every(3000, () => void render());
}

// ---- modules ----

function modulesSection(body: HTMLElement): void {
  const file = input("module-file", { type: "file", accept: ".wasm,application/wasm", required: true });
  const name = input("module-name", { maxlength: "64", pattern: "[a-z0-9_\\-]{1,64}", title: "a-z, 0-9, - and _", required: true, placeholder: "arena" });
  const upload = h("button", { type: "submit" }, "Upload");
  const form = h("form", { id: "upload-form", "aria-label": "upload a module" }, field("Module file (.wasm)", file), field("Name", name), upload);
  const result = h("p", { class: "note", id: "upload-note", role: "status" });
  const box = h("div", { id: "modules-box" });
  body.append(form, result, box);

  file.addEventListener("change", () => {
    const f = file.files?.[0];
    if (f && !name.value) name.value = f.name.replace(/\.wasm$/i, "").toLowerCase().replace(/[^a-z0-9_-]/g, "-").slice(0, 64);
  });
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const f = file.files?.[0];
    if (!f) return;
    upload.disabled = true;
    say(result, `Uploading ${f.name} (${bytes(f.size)}); the server checks it first…`);
    void f.arrayBuffer()
      .then((buf) => admin.uploadModule({ name: name.value.trim(), wasm: new Uint8Array(buf) }))
      .then(
        (r) => {
          const m = r.module;
          say(result, `Uploaded “${m?.name}”: build ${m?.buildId.slice(0, 12)}…, ${m?.maxPlayers} players at ${m?.tickRate} ticks/s. New games of “${m?.name}” use it.`, "ok");
          form.reset();
          void render();
        },
        (err: unknown) => fail(result, `${f.name} was not uploaded`, err),
      )
      .finally(() => (upload.disabled = false));
  });

  const render = (): Promise<void> => load(box, "the modules", async () => {
    const { modules } = await admin.listModules({});
    if (!modules.length) return h("p", { class: "note empty" }, "No modules yet. Upload a .wasm module above (start one with ", h("code", {}, "ludus new"), "); players can then start games of it.");
    return table("modules", ["name", "build", "players", "?tick rate", "?view", "size", "uploaded"], modules.map((m) => [
      m.name, shortId(m.buildId), String(m.maxPlayers), `${m.tickRate}/s`, m.viewFormat, bytes(m.sizeBytes), when(m.createdAt),
    ]));
  });
  void render();
}

// ---- API keys ----

function keysSection(body: HTMLElement): void {
  const name = input("key-name", { maxlength: "64", required: true, placeholder: "game server eu" });
  const scope = select("key-scope", [["admin", "admin: everything"], ["server", "server: accounts, grants, reads"], ["read-only", "read-only"]], "server");
  const create = h("button", { type: "submit" }, "Create key");
  const form = h("form", { id: "key-form", "aria-label": "create an API key" }, field("Name", name), field("Scope", scope), create);
  const secret = h("div", { id: "key-secret" });
  const result = h("p", { class: "note", id: "keys-note", role: "status" });
  const box = h("div", { id: "keys-box" });
  body.append(form, secret, result, box);

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    create.disabled = true;
    admin.createAPIKey({ scope: scope.value, name: name.value.trim() }).then(
      (r) => {
        secret.replaceChildren(secretBox(`New ${r.key?.scope} key “${r.key?.name}”`, r.secret));
        say(result, "");
        form.reset();
        void render();
      },
      (err: unknown) => fail(result, "Could not create the key", err),
    ).finally(() => (create.disabled = false));
  });

  const render = (): Promise<void> => load(box, "the keys", async () => {
    const { keys: list } = await admin.listAPIKeys({});
    if (!list.length) return h("p", { class: "note empty" }, "No API keys. Create one above for your game servers.");
    return table("API keys", ["name", "scope", "?id", "created", "actions"], list.map((k) => [
      k.name || "—", k.scope, shortId(k.id), when(k.createdAt),
      h("span", { class: "actions" },
        button("Rotate", () => void rotate(k.id, k.name), { class: "small", "aria-label": `rotate key ${k.name}` }),
        button("Revoke", () => void revoke(k.id, k.name), { class: "small danger", "aria-label": `revoke key ${k.name}` })),
    ]));
  });

  const rotate = async (id: string, label: string): Promise<void> => {
    if (!(await confirmAction(`Rotate key “${label}”? The old key stops working at once; programs using it need the new one.`, "Rotate"))) return;
    try {
      const r = await admin.rotateAPIKey({ id });
      secret.replaceChildren(secretBox(`Rotated key “${r.key?.name}”`, r.secret));
      void render();
    } catch (err) {
      fail(result, `Could not rotate “${label}”`, err);
    }
  };
  const revoke = async (id: string, label: string): Promise<void> => {
    if (!(await confirmAction(`Revoke key “${label}”? It stops working at once. If this console signed in with it, you will have to sign in again.`, "Revoke"))) return;
    try {
      await admin.revokeAPIKey({ id });
      say(result, `Revoked “${label}”.`, "ok");
      void render();
    } catch (err) {
      fail(result, `Could not revoke “${label}”`, err);
    }
  };
  void render();
}

// ---- webhooks ----

function webhooksSection(body: HTMLElement): void {
  const url = input("webhook-url", { type: "url", maxlength: "2048", placeholder: "https://studio.example/ludus-hook" });
  const save = h("button", { type: "submit" }, "Set webhook");
  const form = h("form", { id: "webhook-form", "aria-label": "set the webhook" }, field("URL", url), save);
  const help = h("p", { class: "note" }, "Match results are POSTed to this URL, signed with the secret shown once when you set it. An empty URL removes the webhook. (The API does not return the current URL.)");
  const secret = h("div", { id: "webhook-secret" });
  const result = h("p", { class: "note", id: "webhook-note", role: "status" });
  const box = h("div", { id: "deliveries-box" });
  body.append(form, help, secret, result, h("h3", {}, "Deliveries"), box);

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    save.disabled = true;
    const u = url.value.trim();
    admin.setWebhook({ url: u }).then(
      (r) => {
        if (u) {
          secret.replaceChildren(secretBox("Signing secret", r.secret));
          say(result, `Webhook set to ${u}.`, "ok");
        } else {
          secret.replaceChildren();
          say(result, "Webhook removed.", "ok");
        }
      },
      (err: unknown) => fail(result, "Could not set the webhook", err),
    ).finally(() => (save.disabled = false));
  });

  const render = (): Promise<void> => load(box, "the deliveries", async () => {
    const { deliveries } = await admin.listWebhookDeliveries({ limit: 50 });
    if (!deliveries.length) return h("p", { class: "note empty" }, "No deliveries yet: one is sent each time a match ends, once a webhook is set.");
    return table("webhook deliveries", ["event", "state", "attempts", "?last error", "?next attempt", "created"], deliveries.map((d) => [
      d.event, d.state, String(d.attempts), d.lastError || "—", d.state === "pending" ? when(d.nextAttemptAt) : "—", when(d.createdAt),
    ]));
  });
  void render();
  every(5000, () => void render());
}

// ---- results: match results, leaderboards, result rules ----

const KINDS: [ResultRuleKind, string][] = [
  [ResultRuleKind.XP, "XP"],
  [ResultRuleKind.CURRENCY, "currency"],
  [ResultRuleKind.ITEM, "item"],
  [ResultRuleKind.LEADERBOARD, "leaderboard"],
];

function labelled<T extends HTMLElement>(el: T, label: string): T {
  el.setAttribute("aria-label", label);
  return el;
}

function resultsSection(body: HTMLElement): void {
  // Match results.
  const account = input("results-account", { maxlength: "64", placeholder: "all players" });
  const show = h("button", { type: "submit" }, "Show");
  const rform = h("form", { id: "results-form", "aria-label": "filter match results" }, field("Account", account), show);
  const rbox = h("div", { id: "results-box" });
  body.append(h("h3", {}, "Match results"), rform, rbox);
  const renderResults = (): Promise<void> => load(rbox, "the match results", async () => {
    const { results } = await admin.listMatchResults({ accountId: account.value.trim(), limit: 50 });
    if (!results.length) return h("p", { class: "note empty" }, "No match results yet: they arrive when a match ends and its module reports a result.");
    return table("match results", ["match", "game", "ended", "players"], results.map((r) => [
      shortId(r.matchId), r.game, when(r.endedAt),
      r.players.map((p) => `${p.accountId.slice(0, 10)}…: ${p.score}${p.place ? ` (#${p.place})` : ""}`).join("; ") || "—",
    ]));
  });
  rform.addEventListener("submit", (e) => {
    e.preventDefault();
    void renderResults();
  });
  void renderResults();

  // Leaderboards.
  const game = input("board-game", { maxlength: "64", required: true, placeholder: "arena" });
  const stat = input("board-stat", { maxlength: "32", pattern: "[a-z][a-z0-9_]{0,31}", placeholder: "score" });
  const order = select("board-order", [[String(LeaderboardOrder.BEST), "best"], [String(LeaderboardOrder.SUM), "sum"]]);
  const lform = h("form", { id: "board-form", "aria-label": "show a leaderboard" }, field("Game", game), field("Stat", stat), field("Order", order), h("button", { type: "submit" }, "Show"));
  const lbox = h("div", { id: "board-box" });
  body.append(h("h3", {}, "Leaderboards"), lform, lbox);
  lform.addEventListener("submit", (e) => {
    e.preventDefault();
    void load(lbox, "the leaderboard", async () => {
      const { entries } = await admin.getAdminLeaderboard({
        query: { game: game.value.trim(), stat: stat.value.trim(), order: Number(order.value) as LeaderboardOrder, limit: 50 },
        aroundAccountId: "",
      });
      if (!entries.length) return h("p", { class: "note empty" }, `No entries on ${game.value.trim()}${stat.value ? ` / ${stat.value}` : ""} yet: entries come from finished matches (a stat board also needs a leaderboard rule below).`);
      return table("leaderboard", ["rank", "account", "best", "sum", "matches"], entries.map((x) => [
        String(x.rank), shortId(x.accountId, 16), String(x.best), String(x.sum), String(x.matches),
      ]));
    });
  });

  // Result rules: an editable table, saved whole (SetResultRules replaces all).
  const rules: ResultRule[] = [];
  const rulesBox = h("div", { id: "rules-box" });
  const rulesNote = h("p", { class: "note", id: "rules-note", role: "status" });
  const add = button("Add rule", () => {
    rules.push({ $typeName: "ludus.v1.ResultRule", game: "", stat: "", kind: ResultRuleKind.XP, target: "", perUnit: 1n, cap: 100n });
    drawRules();
  }, { class: "small" });
  const saveRules = button("Save rules", () => {
    saveRules.disabled = true;
    admin.setResultRules({ rules }).then(
      () => say(rulesNote, `Saved ${rules.length} rule${rules.length === 1 ? "" : "s"}; they apply to results reported from now on.`, "ok"),
      (err: unknown) => fail(rulesNote, "The rules were not saved", err),
    ).finally(() => (saveRules.disabled = false));
  });
  body.append(h("h3", {}, "Result rules"),
    h("p", { class: "note" }, "Rules turn a stat of match results into XP, currency, items or a leaderboard, up to a cap per player and match."),
    rulesBox, h("div", { class: "toolbar" }, add, saveRules), rulesNote);

  const drawRules = (): void => {
    if (!rules.length) {
      rulesBox.replaceChildren(h("p", { class: "note empty" }, "No rules: results credit nothing. Add a rule, e.g. stat “score”, kind XP, cap 500."));
      return;
    }
    rulesBox.replaceChildren(table("result rules", ["game", "stat", "kind", "target", "per unit", "cap", ""], rules.map((r, i) => {
      const bind = (el: HTMLInputElement | HTMLSelectElement, set: (v: string) => void): HTMLInputElement | HTMLSelectElement => {
        el.addEventListener("change", () => set(el.value));
        return el;
      };
      const num = (v: string): bigint => (/^\d+$/.test(v) ? BigInt(v) : 0n);
      return [
        bind(input(`rule-${i}-game`, { value: r.game, placeholder: "every game", "aria-label": `rule ${i + 1} game`, class: "narrow" }), (v) => (r.game = v.trim())),
        bind(input(`rule-${i}-stat`, { value: r.stat, "aria-label": `rule ${i + 1} stat`, class: "narrow" }), (v) => (r.stat = v.trim())),
        bind(labelled(select(`rule-${i}-kind`, KINDS.map(([k, l]) => [String(k), l]), String(r.kind)), `rule ${i + 1} kind`), (v) => (r.kind = Number(v) as ResultRuleKind)),
        bind(input(`rule-${i}-target`, { value: r.target, "aria-label": `rule ${i + 1} target`, class: "narrow" }), (v) => (r.target = v.trim())),
        bind(input(`rule-${i}-per`, { value: String(r.perUnit), inputmode: "numeric", "aria-label": `rule ${i + 1} per unit`, class: "num" }), (v) => (r.perUnit = num(v))),
        bind(input(`rule-${i}-cap`, { value: String(r.cap), inputmode: "numeric", "aria-label": `rule ${i + 1} cap`, class: "num" }), (v) => (r.cap = num(v))),
        button("Remove", () => {
          rules.splice(i, 1);
          drawRules();
        }, { class: "small", "aria-label": `remove rule ${i + 1}` }),
      ];
    })));
  };
  admin.getResultRules({}).then(
    (r) => {
      rules.push(...r.rules);
      drawRules();
    },
    (err: unknown) => {
      fail(rulesNote, "Could not load the rules", err);
      drawRules();
    },
  );
}

// ---- nodes (operator) ----

function nodesSection(body: HTMLElement): void {
  const result = note(body, "nodes-note");
  const box = h("div", { id: "nodes-box" });
  body.append(box);
  const render = (): Promise<void> => load(box, "the nodes", async () => {
    const { nodes } = await opAdmin.listNodes({});
    if (!nodes.length) return h("p", { class: "note empty" }, "No sim nodes are running. Start one (ludus simnode) and it registers itself here.");
    return table("sim nodes", ["node", "region", "games", "state", "?address", "actions"], nodes.map((n) => [
      n.id, n.region || "—", `${n.games}/${n.capacity}`, n.draining ? "draining" : "serving", n.address,
      n.draining ? "—" : button("Drain", (b) => void drain(b, n.id, n.games), { class: "small danger", "aria-label": `drain node ${n.id}` }),
    ]));
  });
  const drain = async (b: HTMLButtonElement, id: string, games: number): Promise<void> => {
    if (!(await confirmAction(`Drain node ${id}? It takes no new games, hands its ${games} game${games === 1 ? "" : "s"} to other nodes without ending any, and leaves the fleet once empty.`, "Drain"))) return;
    b.disabled = true;
    try {
      const r = await fleet.drainNode({ nodeId: id });
      say(result, `Draining ${id}: its ${r.games} game${r.games === 1 ? "" : "s"} move to other nodes; it leaves the list once empty.`, "ok");
    } catch (err) {
      fail(result, `Could not drain ${id}`, err);
      b.disabled = false;
    }
    void render();
  };
  void render();
  every(2000, () => void render());
}

// ---- tenants (operator) ----

function tenantsSection(body: HTMLElement): void {
  const slug = input("tenant-slug", { maxlength: "32", pattern: "[a-z0-9\\-]{2,32}", title: "2..32 of a-z, 0-9 and -", required: true });
  const name = input("tenant-name", { maxlength: "64", placeholder: "Studio name" });
  const create = h("button", { type: "submit" }, "Create tenant");
  const form = h("form", { id: "tenant-form", "aria-label": "create a tenant" }, field("Slug", slug), field("Name", name), create);
  const secret = h("div", { id: "tenant-secret" });
  const result = h("p", { class: "note", id: "tenants-note", role: "status" });
  const box = h("div", { id: "tenants-box" });
  body.append(form, secret, result, box);
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    create.disabled = true;
    opAdmin.createTenant({ slug: slug.value.trim(), name: name.value.trim() }).then(
      (r) => {
        secret.replaceChildren(secretBox(`Admin key of ${r.tenant?.slug}`, r.adminKey));
        say(result, "");
        form.reset();
        void render();
      },
      (err: unknown) => fail(result, "Could not create the tenant", err),
    ).finally(() => (create.disabled = false));
  });
  const render = (): Promise<void> => load(box, "the tenants", async () => {
    const { tenants } = await opAdmin.listTenants({});
    if (!tenants.length) return h("p", { class: "note empty" }, "No tenants yet. Create one above; its admin key is shown once.");
    return table("tenants", ["slug", "name", "?id", "created"], tenants.map((t) => [t.slug, t.name || "—", shortId(t.id, 16), when(t.createdAt)]));
  });
  void render();
}

// ---- start ----

// A tab that signed in before (reload, Back from the player site) stays signed in.
keys = loadKeys();
if (keys && !location.hash) history.replaceState(null, "", `/console#${keys.key ? "games" : "nodes"}`);
route();
