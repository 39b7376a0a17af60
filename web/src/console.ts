// The studio console at /console (dist/console.js, a bundle of its own so the
// player page does not carry it): signed in with a tenant's API key and, for the
// fleet, the operator key; both kept in this tab's sessionStorage only.
//
// Sections are history entries (/console#games, #modules, #keys, #webhooks,
// #results, #matchmaking, #usage, #batch, #nodes, #tenants): Back and Forward move between them, a reload
// stays. Every RPC error is said in words (`words`), its raw "code: message" on
// hover.

import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { AdminService, ResultRuleKind, type ResultRule } from "./gen/ludus/v1/admin_pb";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { BatchService, type BatchProgress, type BatchResult } from "./gen/ludus/v1/batch_pb";
import { FleetService } from "./gen/ludus/v1/fleet_pb";
import { GameLogService } from "./gen/ludus/v1/logs_pb";
import { MatchmakingAdminService, type MatchmakingRules } from "./gen/ludus/v1/matchmaking_pb";
import { QuotaService } from "./gen/ludus/v1/quota_pb";
import { barChart } from "./chart";
import { LeaderboardOrder } from "./gen/ludus/v1/match_pb";
import { codeName } from "./api";
import { button, byId, bytes, field, h, input, say, secretBox, select, shortId, table, when, type Said } from "./dom";

type Admin = Client<typeof AdminService>;
type Fleet = Client<typeof FleetService>;

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
const mmAdmin = createClient(MatchmakingAdminService, tenantTransport);
const quota = createClient(QuotaService, tenantTransport);
const opQuota = createClient(QuotaService, operatorTransport);
const batch = createClient(BatchService, tenantTransport);
const gameLogs = createClient(GameLogService, tenantTransport);

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
  { id: "matchmaking", title: "Matchmaking", needs: "tenant", render: matchmakingSection },
  { id: "usage", title: "Quotas & usage", needs: "tenant", render: usageSection },
  { id: "batch", title: "Batch runs", needs: "tenant", render: batchSection },
  { id: "nodes", title: "Nodes", needs: "operator", render: nodesSection },
  { id: "tenants", title: "Tenants", needs: "operator", render: tenantsSection },
];

let timers: number[] = [];
/** Aborted when the section changes: closes its streams (game logs, a watched run). */
let streams = new AbortController();
function stopTimers(): void {
  for (const t of timers) clearInterval(t);
  timers = [];
  streams.abort();
  streams = new AbortController();
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
  const logs = new LogPanel();
  body.append(h("div", { class: "toolbar" }, refresh), box, logs.el);
  if (!k.operator) body.append(h("p", { class: "note" }, "Moving a game to another node needs the operator key."));
  else if (!k.tenantId) body.append(h("p", { class: "note" }, `The operator key knows no tenant “${k.tenant}”, so games cannot be moved from here.`));
  body.append(h("p", { class: "note" }, "With the operator key, a running game can be handed to another node (its players keep playing) or ended (its players are told why; no result is reported)."));

  const render = (): Promise<void> => load(box, "the games", async () => {
    const { games } = await admin.listGames({});
    if (!games.length) {
      return h("p", { class: "note empty" }, "No games running. Games appear here when players start them: ",
        h("a", { href: playerSite(""), target: "_blank", rel: "noopener" }, "open the player site"), " and play.");
    }
    return table("live games", ["game", "module", "players", "tick", "node", "?state", "actions"], games.map((g) => {
      const actions = h("span", { class: "actions" },
        h("a", { href: playerSite(`spectate=${encodeURIComponent(g.gameId)}`), target: "_blank", rel: "noopener", "aria-label": `spectate game ${g.gameId}` }, "Spectate"),
        button("Logs", () => logs.open(g.gameId), { class: "small", "aria-label": `logs of game ${g.gameId}` }));
      if (k.operator && k.tenantId && g.state === "running") {
        actions.append(button("Hand off", (b) => void handoff(b, g.gameId), { class: "small", "aria-label": `hand off game ${g.gameId} to another node` }));
        actions.append(button("End", (b) => void end(b, g.gameId), { class: "small danger", "aria-label": `end game ${g.gameId}` }));
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

  const end = async (b: HTMLButtonElement, id: string): Promise<void> => {
    if (!(await confirmAction(`End game ${id} now? Its players are told it was ended from the studio console; no result is reported.`, "End game"))) return;
    b.disabled = true;
    say(result, `Ending game ${id}…`);
    try {
      const r = await fleet.endGame({ tenantId: k.tenantId, gameId: id, reason: "from the studio console" });
      say(result, `Ended game ${id} on ${r.nodeId} at tick ${r.tick}.`, "ok");
    } catch (err) {
      fail(result, `Could not end game ${id}`, err);
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
  const help = h("p", { class: "note" }, "Match results are POSTed to this URL, signed with the secret shown once when you set it. An empty URL removes the webhook.");
  const current = h("p", { class: "note", id: "webhook-current" });
  const secret = h("div", { id: "webhook-secret" });
  const result = h("p", { class: "note", id: "webhook-note", role: "status" });
  const box = h("div", { id: "deliveries-box" });
  body.append(current, form, help, secret, result, h("h3", {}, "Deliveries"), box);

  const showCurrent = (): void => {
    admin.getWebhook({}).then(
      (w) => {
        current.textContent = w.url ? `Results go to ${w.url}` : "No webhook is set.";
        if (w.url && !url.value) url.value = w.url;
      },
      (err: unknown) => fail(current, "Could not read the webhook", err),
    );
  };
  showCurrent();

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
        showCurrent();
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
      return table("leaderboard", ["rank", "player", "?account", "best", "sum", "matches"], entries.map((x) => [
        String(x.rank), x.displayName || "—", shortId(x.accountId, 16), String(x.best), String(x.sum), String(x.matches),
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

// ---- game logs (a panel of Live games) ----

/**
 * The guest log of one live game (GameLogService.GameLogs with follow): the
 * lines the module writes, with their tick, as they come. A module that
 * writes nothing is said so ("No output yet"), not taken for a failure.
 */
class LogPanel {
  readonly el: HTMLElement;
  private readonly title: HTMLHeadingElement;
  private readonly state: HTMLParagraphElement;
  private readonly list: HTMLOListElement;
  private abort: AbortController | null = null;
  private lines = 0;

  constructor() {
    this.title = h("h3", { id: "logs-title", tabindex: "-1" });
    this.state = h("p", { class: "note", id: "logs-state", role: "status" });
    this.list = h("ol", { class: "logs", id: "logs-lines", "aria-labelledby": "logs-title" });
    const close = button("Close", () => this.close(), { class: "small", "aria-label": "close the logs" });
    this.el = h("section", { id: "logs-panel", class: "panel", "aria-labelledby": "logs-title", hidden: true },
      h("div", { class: "toolbar" }, this.title, close), this.state, h("div", { class: "logbox", tabindex: "0", role: "region", "aria-label": "log lines" }, this.list));
  }

  close(): void {
    this.abort?.abort();
    this.abort = null;
    this.el.hidden = true;
  }

  open(gameId: string): void {
    this.abort?.abort();
    const abort = new AbortController();
    this.abort = abort;
    streams.signal.addEventListener("abort", () => abort.abort(), { once: true });
    this.lines = 0;
    this.list.replaceChildren();
    this.title.textContent = `Logs of game ${gameId}`;
    say(this.state, "Connecting to the game's node…");
    this.el.hidden = false;
    this.title.focus();
    void this.follow(gameId, abort);
  }

  private async follow(gameId: string, abort: AbortController): Promise<void> {
    let where = "";
    try {
      for await (const m of gameLogs.gameLogs({ gameId, afterSeq: 0n, follow: true }, { signal: abort.signal })) {
        if (m.archived) where = "from the game's archive";
        else if (m.nodeId) where = `live from node ${m.nodeId}`;
        if (m.skipped > 0n) this.list.append(h("li", { class: "gap" }, `… ${m.skipped} line${m.skipped === 1n ? "" : "s"} no longer kept`));
        for (const l of m.lines) {
          this.lines++;
          this.list.append(h("li", { class: l.stderr ? "stderr" : undefined, "data-seq": String(l.seq) },
            h("span", { class: "tick" }, `tick ${l.tick}`), " ", h("span", { class: "stream" }, l.stderr ? "stderr" : "stdout"), " ", l.text));
        }
        if (m.lines.length) this.list.lastElementChild?.scrollIntoView({ block: "nearest" });
        const dropped = m.dropped > 0n ? ` ${m.dropped} older line${m.dropped === 1n ? " was" : "s were"} dropped for room.` : "";
        if (m.state) {
          say(this.state, `The game ${m.state === "failed" ? "failed" : "ended"}${m.message ? `: ${m.message}` : ""}. ${this.count()}${dropped}`, m.state === "failed" ? "error" : "ok");
          return;
        }
        say(this.state, this.lines
          ? `Following ${where}: ${this.count()}${dropped}`
          : `No output yet: the game's module has written nothing. Following ${where}; lines appear here as it writes them.`);
      }
      if (!abort.signal.aborted) say(this.state, `The log stream ended (${this.count()}): the game left its node or ended. Open the logs again to read on.`);
    } catch (err) {
      if (abort.signal.aborted) return;
      fail(this.state, "Could not read the logs", err);
    }
  }

  private count(): string {
    return `${this.lines} line${this.lines === 1 ? "" : "s"}`;
  }
}

// ---- matchmaking rules ----

/** Labels of the rules' fields, as the form names them, by proto and Go name. */
const RULE_FIELDS: [RegExp, string][] = [
  [/rules\.team_size|TeamSize/g, "Team size"],
  [/rules\.teams|\bTeams\b/g, "Teams"],
  [/rules\.band_start|BandStart/g, "Band start"],
  [/rules\.band_step|BandStep/g, "Band step"],
  [/rules\.band_interval_ms|BandInterval/g, "Widen every"],
  [/rules\.band_cap|BandCap/g, "Band cap"],
  [/rules\.max_wait_ms|MaxWait/g, "Max wait"],
  [/rules\.max_rtt_ms|MaxRTT/g, "Regions"],
  [/rules\.mode|\bMode\b/g, "Mode"],
];

/** A rules validation message in the form's words (no field paths, no rule ids). */
export function ruleWords(msg: string): string {
  // "matchmaker: invalid request: matchmaking: invalid rules: BandCap 50 must be …" → "Band cap 50 must be …"
  let t = msg.replace(/^.*\binvalid (?:matchmaking )?rules:\s*/is, "").replace(/^.*\binvalid request:\s*/is, "").replace(/^validation error:\s*/i, "")
    .replace(/\s*\[[a-z0-9_.]+\]/gi, "").replace(/^\s*-\s*/gm, "").replace(/\s*\n\s*/g, "; ");
  for (const [re, label] of RULE_FIELDS) t = t.replace(re, label);
  return sentence(t.replace(/:\s*value must be/g, " must be"));
}

/** "local=250, eu=120" → {local: 250, eu: 120}; throws with the bad part. */
export function parseRegions(s: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const part of s.split(/[,\s]+/).filter(Boolean)) {
    const m = /^([A-Za-z0-9_-]{1,64})=(\d{1,5})$/.exec(part);
    if (!m) throw new Error(`“${part}” is not region=milliseconds (e.g. local=250)`);
    out[m[1]!] = Number(m[2]);
  }
  if (!Object.keys(out).length) throw new Error("list at least one region with its round-trip limit, e.g. local=250");
  return out;
}

function regionsText(m: Record<string, number>): string {
  return Object.entries(m).sort(([a], [b]) => a.localeCompare(b)).map(([r, ms]) => `${r}=${ms}`).join(", ");
}

function matchmakingSection(body: HTMLElement): void {
  const num = (id: string, attrs: Record<string, string>): HTMLInputElement => input(id, { type: "number", class: "num", required: true, ...attrs });
  const mode = input("rules-mode", { maxlength: "64", pattern: "[A-Za-z0-9_\\-]+", title: "letters, digits, - and _", required: true, placeholder: "arena", class: "narrow" });
  const teamSize = num("rules-team-size", { min: "1", max: "32", value: "2" });
  const teams = num("rules-teams", { min: "1", max: "32", value: "2" });
  const bandStart = num("rules-band-start", { min: "0", max: "10000", step: "any", value: "100" });
  const bandStep = num("rules-band-step", { min: "0", max: "10000", step: "any", value: "50" });
  const interval = num("rules-interval", { min: "0.1", max: "3600", step: "any", value: "5" });
  const bandCap = num("rules-band-cap", { min: "0", max: "10000", step: "any", value: "550" });
  const maxWait = num("rules-max-wait", { min: "1", max: "3600", step: "any", value: "45" });
  const bots = input("rules-bots", { type: "checkbox", checked: true });
  const regions = input("rules-regions", { required: true, value: "local=250", placeholder: "local=250, eu=120", class: "narrow" });
  const save = h("button", { type: "submit" }, "Save rules");
  const form = h("form", { id: "rules-form", class: "grid", "aria-label": "matchmaking rules of a mode" },
    field("Mode", mode), field("Team size", teamSize), field("Teams", teams),
    field("Band start (±rating)", bandStart), field("Band step", bandStep), field("Widen every (s)", interval), field("Band cap", bandCap),
    field("Max wait (s)", maxWait), field("Bots fill at max wait", bots), field("Regions (region=max RTT ms)", regions), save);
  const result = h("p", { class: "note", id: "mm-note", role: "status" });
  const box = h("div", { id: "mm-box" });
  body.append(
    h("p", { class: "note" }, "Each mode has its own queue: players searching for it are matched within the rating band, which widens as they wait; a mode plays the module of the same name."),
    form, result, h("h3", {}, "Modes"), box);
  /** Modes shown: the tenant's modules and any mode saved or deleted here. */
  const extra = new Set<string>();

  const fill = (r: MatchmakingRules): void => {
    mode.value = r.mode;
    teamSize.value = String(r.teamSize);
    teams.value = String(r.teams);
    bandStart.value = String(r.bandStart);
    bandStep.value = String(r.bandStep);
    interval.value = String(Number(r.bandIntervalMs) / 1000);
    bandCap.value = String(r.bandCap);
    maxWait.value = String(Number(r.maxWaitMs) / 1000);
    bots.checked = r.botsFillAtTimeout;
    regions.value = regionsText(r.maxRttMs);
  };

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    let maxRttMs: Record<string, number>;
    try {
      maxRttMs = parseRegions(regions.value);
    } catch (err) {
      say(result, `The rules were not saved: ${sentence((err as Error).message)}`, "error");
      regions.focus();
      return;
    }
    const m = mode.value.trim();
    save.disabled = true;
    mmAdmin.setRules({
      rules: {
        mode: m, teamSize: Number(teamSize.value), teams: Number(teams.value),
        bandStart: Number(bandStart.value), bandStep: Number(bandStep.value), bandIntervalMs: BigInt(Math.round(Number(interval.value) * 1000)),
        bandCap: Number(bandCap.value), maxWaitMs: BigInt(Math.round(Number(maxWait.value) * 1000)), botsFillAtTimeout: bots.checked, maxRttMs,
      },
    }).then(
      () => {
        extra.add(m);
        say(result, `Saved the rules of “${m}”: searches are matched by them from now on.`, "ok");
        void render();
      },
      (err: unknown) => {
        const ce = ConnectError.from(err);
        if (ce.code === Code.InvalidArgument) say(result, { text: `The rules were not saved: ${ruleWords(ce.rawMessage)}`, raw: `${codeName(ce.code)}: ${ce.rawMessage}`, code: codeName(ce.code) }, "error");
        else fail(result, "The rules were not saved", err);
      },
    ).finally(() => (save.disabled = false));
  });

  const remove = async (m: string): Promise<void> => {
    if (!(await confirmAction(`Delete the rules of “${m}”? Its queue closes: new searches are refused; players already searching wait until they leave.`, "Delete"))) return;
    try {
      await mmAdmin.deleteRules({ mode: m });
      extra.add(m);
      say(result, `Deleted the rules of “${m}”: its queue is closed.`, "ok");
    } catch (err) {
      fail(result, `Could not delete the rules of “${m}”`, err);
    }
    void render();
  };

  const render = (): Promise<void> => load(box, "the modes", async () => {
    const { modules } = await admin.listModules({});
    const modes = [...new Set([...modules.map((x) => x.name), ...extra])].sort();
    if (!modes.length) return h("p", { class: "note empty" }, "No modes yet: upload a module (a mode plays the module of its name), or save rules for a mode above.");
    const rows = await Promise.all(modes.map(async (m) => {
      try {
        return { m, r: (await mmAdmin.getRules({ mode: m })).rules ?? null, err: null };
      } catch (err) {
        return { m, r: null, err: ConnectError.from(err).code === Code.NotFound ? null : err };
      }
    }));
    return table("matchmaking rules", ["mode", "teams", "band", "?max wait", "?bots fill", "regions", "actions"], rows.map(({ m, r, err }) => {
      if (!r) return [m, err ? words(err).text : "no rules: searches are refused", "—", "—", "—", "—",
        button("Set rules", () => { mode.value = m; mode.focus(); }, { class: "small", "aria-label": `set rules of ${m}` })];
      return [
        m, `${r.teams} × ${r.teamSize}`, `±${r.bandStart} +${r.bandStep}/${Number(r.bandIntervalMs) / 1000} s ≤ ${r.bandCap}`,
        `${Number(r.maxWaitMs) / 1000} s`, r.botsFillAtTimeout ? "yes" : "no", regionsText(r.maxRttMs),
        h("span", { class: "actions" },
          button("Edit", () => { fill(r); mode.focus(); }, { class: "small", "aria-label": `edit rules of ${m}` }),
          button("Delete", () => void remove(m), { class: "small danger", "aria-label": `delete rules of ${m}` })),
      ];
    }));
  });
  void render();
}

// ---- quotas and usage ----

type QuotaKey = "liveGames" | "gamesPerMinute" | "cpuSecondsPerHour" | "archiveBytes" | "maxGameDurationS";

const QUOTAS: [QuotaKey, string, string][] = [
  ["liveGames", "Live games at once", "games"],
  ["gamesPerMinute", "Games per player per minute", "per minute"],
  ["cpuSecondsPerHour", "CPU-seconds per hour", "CPU-s"],
  ["archiveBytes", "Archived logs", "bytes"],
  ["maxGameDurationS", "Longest game", "s"],
];

function usageSection(body: HTMLElement): void {
  const k = keys!;
  const qbox = h("div", { id: "quotas-box" });
  const qnote = h("p", { class: "note", id: "quotas-note", role: "status" });
  const ubox = h("div", { id: "usage-box" });
  body.append(h("h3", {}, "Quotas"), qbox, qnote, h("h3", {}, "Usage, last 24 hours"), ubox);

  const renderQuotas = (): Promise<void> => load(qbox, "the quotas", async () => {
    const r = await quota.getQuotas({ tenant: "" });
    const q = r.quotas;
    const value = (key: QuotaKey, unit: string): string => {
      const v = q ? q[key] : 0n;
      if (!v) return "unlimited";
      return key === "archiveBytes" ? bytes(v) : `${v} ${unit}`;
    };
    const dl = h("dl", { class: "facts", id: "quotas-list" });
    for (const [key, label, unit] of QUOTAS) dl.append(h("dt", {}, label), h("dd", {}, value(key, unit)));
    const out = h("div", {}, dl, h("p", { class: "note" }, r.updatedAt ? `Set ${when(r.updatedAt)}.` : "Never set: nothing is limited."));
    if (!k.operator) {
      out.append(h("p", { class: "note" }, "Quotas are set by the operator: sign in with the operator key as well to change them."));
      return out;
    }
    const fields = QUOTAS.map(([key, label]) => [key, input(`quota-${key}`, { type: "number", min: "0", step: "1", class: "num", value: String(q ? q[key] : 0n), "aria-describedby": "quota-help" }), label] as const);
    const set = h("button", { type: "submit" }, "Set quotas");
    const form = h("form", { id: "quotas-form", class: "grid", "aria-label": "set the quotas" }, ...fields.map(([, el, label]) => field(label, el)), set);
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      set.disabled = true;
      const quotas = Object.fromEntries(fields.map(([key, el]) => [key, BigInt(/^\d+$/.test(el.value) ? el.value : "0")])) as Record<QuotaKey, bigint>;
      opQuota.setQuotas({ tenant: k.tenant, quotas }).then(
        () => {
          say(qnote, "Quotas set; gateways apply them within a minute.", "ok");
          void renderQuotas();
        },
        (err: unknown) => fail(qnote, "The quotas were not set", err),
      ).finally(() => (set.disabled = false));
    });
    out.append(form, h("p", { class: "note", id: "quota-help" }, "0 means unlimited."));
    return out;
  });

  const renderUsage = (): Promise<void> => load(ubox, "the usage", async () => {
    const { records } = await quota.getUsage({ tenant: "" });
    const HOUR = 3_600_000;
    const now = Math.floor(Date.now() / HOUR) * HOUR;
    const hours = Array.from({ length: 24 }, (_, i) => now - (23 - i) * HOUR);
    const cpu = hours.map(() => 0);
    const player = hours.map(() => 0);
    for (const r of records) {
      const i = r.hour ? hours.indexOf(Math.floor(timestampMs(r.hour) / HOUR) * HOUR) : -1;
      if (i < 0) continue;
      cpu[i]! += r.cpuSeconds;
      player[i]! += r.playerSeconds / 3600;
    }
    const labels = hours.map((t) => `${String(new Date(t).getHours()).padStart(2, "0")}:00`);
    const fmt = (v: number): string => (v >= 100 ? v.toFixed(0) : v >= 1 ? v.toFixed(1) : v.toFixed(2));
    const chart = barChart("Usage per hour, last 24 hours", labels, [
      { name: "CPU-seconds", cls: "s-cpu", values: cpu, format: (v) => `${fmt(v)} CPU-s` },
      { name: "player-hours", cls: "s-player", values: player, format: (v) => `${fmt(v)} player-h` },
    ]);
    const out = h("div", {}, h("figure", { class: "chartbox", id: "usage-chart" }, chart));
    if (!records.length) {
      out.append(h("p", { class: "note empty" }, "No usage in the last 24 hours: usage is metered while games run and reported every minute."));
      return out;
    }
    out.append(table("usage per hour", ["hour", "CPU-s", "player-h", "?stream", "?etcd writes", "?archived", "?timed out"], [...records].reverse().map((r) => [
      when(r.hour), fmt(r.cpuSeconds), fmt(r.playerSeconds / 3600), bytes(r.streamBytes), String(r.etcdWrites), bytes(r.archiveBytes), String(r.gamesTimedOut),
    ])));
    return out;
  });
  void renderQuotas();
  void renderUsage();
  every(60_000, () => void renderUsage());
}

// ---- batch runs ----

const RUN_KEY = "ludus.console.run";

const REASONS: Record<string, string> = {
  complete: "every game was played",
  deadline: "it reached its deadline",
  budget: "it used its CPU budget",
  canceled: "it was cancelled",
  orphaned: "its workers were lost",
};

/** A run's results summed up: wins per slot, draws, failures, mean length. */
export function resultSummary(results: BatchResult[]): string {
  if (!results.length) return "No results yet.";
  const wins = new Map<number, number>();
  let draws = 0;
  let failed = 0;
  let timedOut = 0;
  let ticks = 0;
  for (const r of results) {
    if (r.error) failed++;
    else if (r.timedOut) timedOut++;
    if (r.winner >= 0) wins.set(r.winner, (wins.get(r.winner) ?? 0) + 1);
    else if (!r.error) draws++;
    ticks += Number(r.ticks);
  }
  const parts = [...wins].sort(([a], [b]) => a - b).map(([slot, n]) => `slot ${slot} won ${n}`);
  if (draws) parts.push(`${draws} without a winner`);
  if (timedOut) parts.push(`${timedOut} timed out`);
  if (failed) parts.push(`${failed} failed`);
  return `${results.length} result${results.length === 1 ? "" : "s"}: ${parts.join(", ")}; ${Math.round(ticks / results.length)} ticks a game on average.`;
}

function batchSection(body: HTMLElement): void {
  const module = input("run-module", { maxlength: "64", required: true, value: "arena", class: "narrow" });
  const games = input("run-games", { type: "number", min: "1", max: "100000", step: "1", required: true, value: "10", class: "num" });
  const budget = input("run-budget", { type: "number", min: "0.1", step: "any", required: true, value: "60", class: "num" });
  const config = input("run-config", { maxlength: "4096", placeholder: "{\"bots\":4,\"time_limit_s\":5}", "aria-describedby": "run-help" });
  const keep = input("run-keep", { type: "checkbox" });
  const start = h("button", { type: "submit" }, "Start run");
  const form = h("form", { id: "run-form", class: "grid", "aria-label": "start a batch run" },
    field("Module", module), field("Games", games), field("Budget (CPU-s)", budget), field("Config (JSON)", config), field("Keep input logs", keep), start);
  const result = h("p", { class: "note", id: "run-note", role: "status" });
  const box = h("div", { id: "run-box" });
  body.append(
    h("p", { class: "note", id: "run-help" }, "Bot games of a module's newest build, played by the fleet as fast as it can, within a CPU budget. The config is the module's (empty: its defaults)."),
    form, result, box);

  let watching: AbortController | null = null;
  const results: BatchResult[] = [];

  const show = (p: BatchProgress): void => {
    const ended = p.state === "ended";
    const bar = h("progress", { id: "run-progress", max: String(Math.max(1, p.games)), value: String(p.done), "aria-label": "games played" });
    const facts = h("dl", { class: "facts" },
      h("dt", {}, "run"), h("dd", {}, shortId(p.runId, 20)),
      h("dt", {}, "state"), h("dd", { id: "run-state" }, ended ? `ended: ${REASONS[p.reason] ?? p.reason}` : p.state),
      h("dt", {}, "games"), h("dd", { id: "run-done" }, `${p.done} of ${p.games} played${p.failed ? `, ${p.failed} failed` : ""}${p.timedOut ? `, ${p.timedOut} timed out` : ""}`),
      h("dt", {}, "CPU"), h("dd", {}, `${p.cpuS.toFixed(1)} of ${p.budgetCpuS} CPU-s`),
      h("dt", {}, "speed"), h("dd", {}, p.speedup > 0 ? `${p.speedup.toFixed(1)}× real time` : "—"));
    const actions = h("div", { class: "toolbar", id: "run-actions" });
    if (!ended) actions.append(button("Cancel run", (b) => void cancel(b, p.runId), { class: "small danger" }));
    box.replaceChildren(h("div", { class: "progress" }, bar, h("span", {}, `${p.games ? Math.floor((100 * p.done) / p.games) : 0}%`)), facts,
      h("p", { class: "note", id: "run-summary" }, resultSummary(results)), actions);
    if (ended) void archive(p.runId, actions);
  };

  const archive = async (runId: string, actions: HTMLElement): Promise<void> => {
    try {
      const r = await batch.runArchiveLink({ runId, ttlS: 0n });
      const href = new URL(r.url, location.origin).href;
      const a = h("a", { href, id: "run-archive", download: "" }, "Download the archive (.tar.gz)");
      const copy = button("Copy link", (b) => {
        void navigator.clipboard?.writeText(href).then(() => (b.textContent = "Copied"), () => (b.textContent = "Select and copy it"));
      }, { class: "small", "aria-label": "copy the archive link" });
      actions.append(a, copy, h("span", { class: "note" }, `No sign-in needed; valid until ${when(r.expiresAt)}.`));
    } catch (err) {
      const p = h("p", { class: "note" });
      fail(p, "No archive link", err);
      actions.append(p);
    }
  };

  const watch = async (runId: string): Promise<void> => {
    watching?.abort();
    const abort = new AbortController();
    watching = abort;
    streams.signal.addEventListener("abort", () => abort.abort(), { once: true });
    results.length = 0;
    try {
      for await (const m of batch.watchRun({ runId }, { signal: abort.signal })) {
        // The summary reads the fields only; a result's JSON is up to 1 MiB
        // and a run has up to 100,000 (spread into push, they would also
        // pass the engine's argument limit).
        for (const r of m.results) {
          r.resultJson = "";
          results.push(r);
        }
        if (m.progress) show(m.progress);
      }
    } catch (err) {
      if (abort.signal.aborted) return;
      fail(result, "Stopped following the run", err);
      if (ConnectError.from(err).code === Code.NotFound) sessionStorage.removeItem(RUN_KEY);
    }
  };

  const cancel = async (b: HTMLButtonElement, runId: string): Promise<void> => {
    if (!(await confirmAction("Cancel this run? Games not played yet are not played; results already in are kept.", "Cancel run"))) return;
    b.disabled = true;
    try {
      await batch.cancelRun({ runId });
      say(result, "Run cancelled.", "ok");
    } catch (err) {
      fail(result, "Could not cancel the run", err);
      b.disabled = false;
    }
  };

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const cfg = config.value.trim();
    if (cfg) {
      try {
        JSON.parse(cfg);
      } catch {
        say(result, "The run was not started: the config is not valid JSON.", "error");
        config.focus();
        return;
      }
    }
    start.disabled = true;
    batch.startRun({
      spec: {
        module: module.value.trim(), games: Number(games.value), budgetCpuS: Number(budget.value), keepLogs: keep.checked,
        maps: cfg ? [{ name: "", configJson: cfg }] : [],
      },
    }).then(
      (r) => {
        const p = r.progress;
        if (!p) return;
        say(result, `Started run ${p.runId}: ${p.games} games of ${p.spec?.module || module.value.trim()}.`, "ok");
        try {
          sessionStorage.setItem(RUN_KEY, p.runId);
        } catch {
          // storage disabled: the run is shown while the page stays
        }
        show(p);
        void watch(p.runId);
      },
      (err: unknown) => fail(result, "The run was not started", err),
    ).finally(() => (start.disabled = false));
  });

  let last: string | null = null;
  try {
    last = sessionStorage.getItem(RUN_KEY);
  } catch {
    last = null;
  }
  if (last) {
    box.replaceChildren(h("p", { class: "note" }, "Loading the last run started in this tab…"));
    void watch(last);
  } else {
    box.replaceChildren(h("p", { class: "note empty" }, "No run started in this tab yet: start one above."));
  }
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
