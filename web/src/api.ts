// Connect clients, the guest session and its ticket renewal.

import { Code, ConnectError, createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-web";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { AuthService, type Session as AuthSession } from "./gen/ludus/v1/auth_pb";
import { GameService } from "./gen/ludus/v1/game_pb";
import { ProgressionService } from "./gen/ludus/v1/match_pb";
import { MatchmakingService } from "./gen/ludus/v1/matchmaking_pb";

export type GameClient = Client<typeof GameService>;
export type MatchmakingClient = Client<typeof MatchmakingService>;
export type ProgressionClient = Client<typeof ProgressionService>;

/** AuthService calls made as the signed-in player (the ticket as bearer). */
const AUTH_WITH_TICKET = new Set(["LinkEmail", "LinkDevice", "Unlink"]);

/** Settings read from the page URL's query string. */
export interface Config {
  /** Tenant slug (`?tenant=` or the lobby's tenant field, default "demo"). */
  tenant: string;
  /** Wire protocol (`?protocol=grpcweb`, default Connect with binary messages). */
  protocol: "connect" | "grpcweb";
  /** Module created by "Play as guest" (`?module=`, default "arena"). */
  module: string;
  /** Bots added to a created game (`?bots=`, default 3). */
  bots: number;
  /**
   * Identity profile (`?player=`): each profile has its own device id, hence its own
   * guest account. Tabs have their own identities anyway (TabIdentity).
   */
  profile: string;
}

export function readConfig(url: URL): Config {
  const q = url.searchParams;
  const bots = Number.parseInt(q.get("bots") ?? "", 10);
  return {
    tenant: q.get("tenant") || "demo",
    protocol: q.get("protocol") === "grpcweb" ? "grpcweb" : "connect",
    module: q.get("module") || "arena",
    bots: Number.isFinite(bots) && bots >= 0 ? bots : 3,
    profile: (q.get("player") ?? "").replace(/[^A-Za-z0-9_-]/g, "").slice(0, 32),
  };
}

const ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";

/** A random id of `n` characters of [A-Za-z0-9_-] (64 symbols, so no modulo bias). */
export function randomId(n: number): string {
  const bytes = crypto.getRandomValues(new Uint8Array(n));
  let s = "";
  for (const b of bytes) s += ID_ALPHABET[b & 63];
  return s;
}

function storageGet(key: string): string | null {
  try {
    return sessionStorage.getItem(key);
  } catch {
    return null; // storage disabled: fall back to a per-page identity
  }
}

function storageSet(key: string, value: string): void {
  try {
    sessionStorage.setItem(key, value);
  } catch {
    // ignore: see storageGet
  }
}

function storageRemove(key: string): void {
  try {
    sessionStorage.removeItem(key);
  } catch {
    // ignore: see storageGet
  }
}

/**
 * The tab's identity in one tenant: its guest device id (hence its account), the
 * name typed in it and whether it signed in, kept in sessionStorage: per tab, kept
 * across reloads and history navigation, never shared with other tabs, so an invite
 * link opened in this browser is a second player with an empty name field. A tab
 * duplicated by the browser starts with a copy of the sessionStorage; claimIdentity
 * notices the copy (another live tab answers for the same id) and takes a new id.
 *
 * Each tenant gets its own device id. The device id is all a guest signs in with,
 * and a tenant's admin key can read its own accounts' device ids: one id sent to
 * every tenant the tab visits would let any of them sign in as the player's guest
 * account of another.
 */
export class TabIdentity {
  private readonly key: string;
  private id: string;
  private channel: BroadcastChannel | null = null;

  constructor(tenant: string, profile: string) {
    this.key = `ludus.guest.${tenant}` + (profile ? `.${profile}` : "");
    const valid = (v: string | null): v is string => !!v && /^[A-Za-z0-9_-]{16,128}$/.test(v);
    let id = storageGet(this.key);
    if (!valid(id)) {
      // A tab from before ids were per tenant keeps its guest in the first
      // tenant it signs in to again, and in no other.
      const legacy = profile ? `ludus.device.${profile}` : "ludus.device";
      const old = storageGet(legacy);
      id = valid(old) ? old : randomId(32);
      storageSet(this.key, id);
      if (valid(old)) {
        for (const k of ["name", "signed", "email", "refresh"]) {
          const v = storageGet(`${legacy}.${k}`);
          if (v) storageSet(`${this.key}.${k}`, v);
        }
      }
      for (const k of ["", ".name", ".signed", ".email", ".refresh"]) storageRemove(legacy + k);
    }
    this.id = id;
  }

  /** Stops answering other tabs for this identity (the tab left its tenant). */
  close(): void {
    this.channel?.close();
    this.channel = null;
  }

  get name(): string {
    return storageGet(`${this.key}.name`) ?? "";
  }

  set name(v: string) {
    storageSet(`${this.key}.name`, v);
  }

  /** Whether this tab signed in before (a reload or Forward re-joins at once). */
  get signedIn(): boolean {
    return storageGet(`${this.key}.signed`) === "1";
  }

  set signedIn(v: boolean) {
    storageSet(`${this.key}.signed`, v ? "1" : "");
  }

  /** The email of the account, once this tab upgraded it or signed in with one ("" for a guest). */
  get email(): string {
    return storageGet(`${this.key}.email`) ?? "";
  }

  set email(v: string) {
    storageSet(`${this.key}.email`, v);
  }

  /**
   * The refresh token of an email sign-in (renewed with AuthService.Refresh, single
   * use); "" for guests, whose refresh token the Session keeps in memory.
   */
  get refresh(): string {
    return storageGet(`${this.key}.refresh`) ?? "";
  }

  set refresh(v: string) {
    storageSet(`${this.key}.refresh`, v);
  }

  /** Forgets everything: a new device id (a new guest), no name, no email. */
  reset(): void {
    this.id = randomId(32);
    storageSet(this.key, this.id);
    this.signedIn = false;
    this.name = "";
    this.email = "";
    this.refresh = "";
  }

  /** The device id, after making sure no other open tab uses it (waits up to `ms`). */
  async claim(ms = 150): Promise<string> {
    if (this.channel || typeof BroadcastChannel === "undefined") return this.id;
    const ch = new BroadcastChannel("ludus.identity");
    this.channel = ch;
    let taken = false;
    const asked = this.id;
    ch.onmessage = (e: MessageEvent<{ q?: string; taken?: string }>) => {
      if (e.data.q === this.id) ch.postMessage({ taken: this.id });
      if (e.data.taken === asked) taken = true;
    };
    ch.postMessage({ q: asked });
    await new Promise((r) => setTimeout(r, ms));
    if (taken) {
      // A duplicated tab: the other one keeps the identity and the name.
      this.id = randomId(32);
      storageSet(this.key, this.id);
      this.signedIn = false;
      this.name = "";
    }
    return this.id;
  }
}

const REGION_KEY = "ludus.region";

/**
 * The region this page's gateway serves, for matchmaking's round-trip times:
 * `?region=`, else the region remembered from the gateway's last `Ping`
 * (`PingResponse.region`) or game stream (`Status.region`), else "local" (what
 * `ludus dev` calls its one region).
 */
export function gatewayRegion(url: URL = new URL(location.href)): string {
  const ok = (r: string | null): r is string => !!r && /^[A-Za-z0-9_-]{1,64}$/.test(r);
  const q = url.searchParams.get("region");
  if (ok(q)) return q;
  const seen = storageGet(REGION_KEY);
  return ok(seen) ? seen : "local";
}

/** Remembers the region a game stream reported (see gatewayRegion). */
export function rememberRegion(region: string): void {
  if (region && storageGet(REGION_KEY) !== region) storageSet(REGION_KEY, region);
}

/** Renew the ticket this long before it expires. */
const RENEW_BEFORE_MS = 30_000;
/** Ticket lifetime assumed when the server does not say. */
const DEFAULT_TICKET_MS = 120_000;
const RETRY_LOGIN_MS = 5_000;

/**
 * Session holds the current ticket (a guest's, or an email account's), renews it
 * before it expires and provides the game and progression clients; every call
 * carries the ticket current at the time of the call.
 */
export class Session {
  readonly game: GameClient;
  readonly progression: ProgressionClient;
  readonly matchmaking: MatchmakingClient;
  ticket = "";
  accountId = "";
  displayName = "";
  /** Called after each successful login or renewal, and with the error of a failed one. */
  onChange: (err?: unknown) => void = () => {};

  private readonly auth: Client<typeof AuthService>;
  identity: TabIdentity;
  private renewTimer = 0;
  private pending: Promise<void> | null = null;
  private pendingName = "";
  /**
   * A guest's refresh token and the name its GuestLogin sent. In memory only: it is
   * single use, and tabs that shared it would each spend it (the second use ends the
   * session). A reload signs the guest in again.
   */
  private guestRefresh = "";
  private guestName = "";

  constructor(private readonly cfg: Config) {
    const bearer: Interceptor = (next) => async (req) => {
      const ticket = this.ticket;
      if (!ticket || (req.service.typeName === AuthService.typeName && !AUTH_WITH_TICKET.has(req.method.name))) return next(req);
      req.header.set("Authorization", `Bearer ${ticket}`);
      try {
        return await next(req);
      } catch (err) {
        // A rejected ticket (expired while the page slept, keys rotated, ...): get a new
        // one for the next calls, once per ticket. Stream errors are handled by callers.
        if (ConnectError.from(err).code === Code.Unauthenticated && ticket === this.ticket) {
          this.login().catch(() => {});
        }
        throw err;
      }
    };
    const opts = { baseUrl: location.origin, interceptors: [bearer] };
    const transport: Transport =
      cfg.protocol === "grpcweb"
        ? createGrpcWebTransport(opts)
        : createConnectTransport({ ...opts, useBinaryFormat: true });
    this.auth = createClient(AuthService, transport);
    this.game = createClient(GameService, transport);
    this.progression = createClient(ProgressionService, transport);
    this.matchmaking = createClient(MatchmakingService, transport);
    this.identity = new TabIdentity(cfg.tenant, cfg.profile);
  }

  get tenant(): string {
    return this.cfg.tenant;
  }

  /** Signs out of the current tenant when `tenant` differs; the next login uses it. */
  setTenant(tenant: string): void {
    if (tenant === this.cfg.tenant) return;
    this.cfg.tenant = tenant;
    // The new tenant's own guest (TabIdentity); the name typed carries over.
    const name = this.identity.name;
    this.identity.close();
    this.identity = new TabIdentity(tenant, this.cfg.profile);
    if (!this.identity.name) this.identity.name = name;
    clearTimeout(this.renewTimer);
    this.guestRefresh = "";
    this.ticket = "";
    this.accountId = "";
    this.displayName = "";
    this.onChange();
  }

  get loggedIn(): boolean {
    return this.ticket !== "";
  }

  /**
   * Signs in as the guest of this device (same account every time, fresh ticket) and
   * schedules the renewal. Concurrent calls with the same name share one request.
   */
  login(displayName = this.identity.name): Promise<void> {
    if (this.pending && this.pendingName === displayName) return this.pending;
    const p = (this.pending ?? Promise.resolve())
      .catch(() => {})
      .then(() => this.doLogin(displayName));
    this.pending = p;
    this.pendingName = displayName;
    const clear = (): void => {
      if (this.pending === p) this.pending = null;
    };
    p.then(clear, clear);
    return p;
  }

  private async doLogin(displayName: string): Promise<void> {
    clearTimeout(this.renewTimer);
    const tenant = this.cfg.tenant;
    try {
      const refresh = this.identity.refresh;
      if (refresh) {
        // An email sign-in: trade the refresh token (single use) for a new one.
        try {
          const res = await this.auth.refresh({ tenant, refreshToken: refresh });
          if (tenant !== this.cfg.tenant) return;
          if (res.session) {
            this.adopt(res.session);
            return;
          }
        } catch (err) {
          if (ConnectError.from(err).code !== Code.Unauthenticated) throw err;
          // Revoked or expired: signed out; this tab goes on as a new guest.
          this.identity.reset();
        }
      }
      const name = displayName.trim().slice(0, 32);
      const guestRefresh = this.guestRefresh;
      if (!refresh && guestRefresh && name === this.guestName) {
        // A guest's renewal: Refresh continues the session, where another GuestLogin
        // would start one (the backend limits sign-ins per account and keeps an
        // account's newest sessions only). A new name needs GuestLogin, which renames.
        try {
          const res = await this.auth.refresh({ tenant, refreshToken: guestRefresh });
          if (tenant !== this.cfg.tenant) return;
          if (res.session) {
            this.adopt(res.session, false);
            return;
          }
        } catch (err) {
          if (ConnectError.from(err).code !== Code.Unauthenticated) throw err;
          this.guestRefresh = ""; // spent or ended: sign the device in again
        }
      }
      const deviceId = await this.identity.claim();
      const res = await this.auth.guestLogin({ tenant, deviceId, displayName: name });
      if (tenant !== this.cfg.tenant) return; // the tenant changed meanwhile
      this.guestName = name;
      this.adopt(res, false);
    } catch (err) {
      // Keep the old ticket (it may still be valid) and try again shortly.
      this.renewTimer = window.setTimeout(() => void this.login().catch(() => {}), RETRY_LOGIN_MS);
      this.onChange(err);
      throw err;
    }
  }

  /**
   * Uses a new ticket and schedules its renewal; keeps the refresh token (an email
   * sign-in's in the tab's storage, a guest's in memory).
   */
  private adopt(s: Omit<AuthSession, "$typeName">, email = true): void {
    this.ticket = s.ticket;
    this.accountId = s.accountId;
    this.displayName = s.displayName;
    if (email) {
      this.identity.refresh = s.refreshToken;
      this.guestRefresh = "";
    } else {
      this.guestRefresh = s.refreshToken;
    }
    const expires = s.expiresAt ? timestampMs(s.expiresAt) : Date.now() + DEFAULT_TICKET_MS;
    const delay = Math.max(RETRY_LOGIN_MS, expires - Date.now() - RENEW_BEFORE_MS);
    this.renewTimer = window.setTimeout(() => void this.login().catch(() => {}), delay);
    this.onChange();
  }

  /** Adds an email and password to the signed-in account (a guest keeps its progress). */
  async linkEmail(email: string, password: string): Promise<void> {
    if (!this.loggedIn) await this.login();
    await this.auth.linkEmail({ email, password });
    this.identity.email = email;
    this.identity.signedIn = true;
    this.onChange();
  }

  /** Signs in with an email and password, instead of this tab's guest. */
  async emailLogin(email: string, password: string): Promise<void> {
    await this.pending?.catch(() => {});
    clearTimeout(this.renewTimer);
    const res = await this.auth.emailLogin({ tenant: this.cfg.tenant, email, password });
    if (!res.session) throw new Error("EmailLogin returned no session");
    this.identity.email = email;
    this.identity.signedIn = true;
    this.adopt(res.session);
  }

  /**
   * Signs out: revokes the refresh token of an email sign-in, forgets the tab's
   * identity (the next sign-in is a new guest) and signs in as that guest.
   */
  async signOut(): Promise<void> {
    await this.pending?.catch(() => {});
    clearTimeout(this.renewTimer);
    const refresh = this.identity.refresh || this.guestRefresh;
    if (refresh) await this.auth.logout({ tenant: this.cfg.tenant, refreshToken: refresh }).catch(() => {});
    this.guestRefresh = "";
    this.identity.reset();
    this.ticket = "";
    this.accountId = "";
    this.displayName = "";
    this.onChange();
    await this.login("");
  }
}

/** "unavailable", "deadline_exceeded", ... as the Connect protocol spells codes. */
export function codeName(code: Code): string {
  return (Code[code] ?? "unknown").replace(/[a-z](?=[A-Z])/g, "$&_").toLowerCase();
}

/** A short, user-facing description of an RPC error: "code: message". */
export function describeError(err: unknown): string {
  const ce = ConnectError.from(err);
  return `${codeName(ce.code)}: ${ce.rawMessage || "(no message)"}`;
}

/** A user-facing error: what happened in words, whether trying again may help. */
export interface Trouble {
  text: string;
  /** Trying again later may work (the server was unreachable, busy, slow). */
  retry: boolean;
  /** The game does not exist (any more): offer no links to it. */
  gone: boolean;
  /** "code: message", for the details. */
  raw: string;
  /**
   * How long before trying again automatically can work: 0 (unknown: back off as
   * usual), the server's wait (a limit that refills: "retry in N s", Retry-After),
   * or Infinity (a limit that does not refill by itself: only the player's Retry).
   */
  waitMs: number;
}

/** The wait a refusal names: its Retry-After metadata or "retry in N s" (ms; 0 if none). */
export function refusalWait(ce: ConnectError): number {
  const header = Number.parseInt(ce.metadata.get("retry-after") ?? "", 10);
  if (Number.isFinite(header) && header > 0) return header * 1000;
  const said = /retry in (\d+) ?s\b/i.exec(ce.rawMessage);
  return said ? Number(said[1]) * 1000 : 0;
}

/** Words for an RPC error, instead of its code ("not_found: …"). */
export function trouble(err: unknown, subject: "game" | "tenant" = "game"): Trouble {
  const ce = ConnectError.from(err);
  const raw = describeError(err);
  const t = (text: string, retry = false, gone = false, waitMs = 0): Trouble => ({ text, retry, gone, raw, waitMs });
  switch (ce.code) {
    case Code.NotFound:
      return subject === "tenant" ? t("There is no tenant by that name.") : t("This game has ended or never existed.", false, true);
    case Code.Unavailable:
    case Code.Unknown:
      return t("The server cannot be reached right now.", true);
    case Code.DeadlineExceeded:
      return t("The server took too long to answer.", true);
    case Code.ResourceExhausted: {
      if (/full/i.test(ce.rawMessage)) return t("This game is full.", true);
      // A stated limit (a tenant's quota, a per-account rate): the server's own
      // words say which and what to do. One that names a wait is tried again after
      // it; one that does not (live games, stored archives) waits for the player.
      if (/limit is|rate limit|too many/i.test(ce.rawMessage)) {
        const wait = refusalWait(ce);
        return t(`${ce.rawMessage.charAt(0).toUpperCase()}${ce.rawMessage.slice(1)}.`, true, false, wait || Infinity);
      }
      return t("The server is busy; try again in a moment.", true);
    }
    case Code.PermissionDenied:
      // A game's refusal says why (a matched game seats only its players).
      if (subject === "game" && ce.rawMessage) return t(`${ce.rawMessage.charAt(0).toUpperCase()}${ce.rawMessage.slice(1)}.`);
      return t("You are not allowed to do that in this tenant.");
    case Code.Unauthenticated:
      return t("Your session expired; signing in again.", true);
    case Code.InvalidArgument:
      return t(`The server refused the request: ${ce.rawMessage || "invalid argument"}.`);
    case Code.FailedPrecondition: {
      const text = ce.rawMessage ? `${ce.rawMessage.charAt(0).toUpperCase()}${ce.rawMessage.slice(1)}.` : "Not possible right now.";
      // The gateway's "game X is ended" / "game X failed: why", the node's
      // "the game is over": nothing to retry.
      const over = /^game \S+ (is \w+|failed)\b|^the game is over/.test(ce.rawMessage);
      return t(text, !over, over);
    }
    case Code.Aborted:
      return t("The request was interrupted.", true);
    case Code.Canceled:
      return t("Cancelled.");
    default:
      return t("Something went wrong on the server.", true);
  }
}

export function isCanceled(err: unknown): boolean {
  return ConnectError.from(err).code === Code.Canceled;
}
