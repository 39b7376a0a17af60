// Connect clients, the guest session and its ticket renewal.

import { Code, ConnectError, createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-web";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { AuthService } from "./gen/ludus/v1/auth_pb";
import { GameService } from "./gen/ludus/v1/game_pb";

export type GameClient = Client<typeof GameService>;

/** Settings read from the page URL's query string. */
export interface Config {
  /** Tenant slug (`?tenant=`, default "demo"). */
  tenant: string;
  /** Wire protocol (`?protocol=grpcweb`, default Connect with binary messages). */
  protocol: "connect" | "grpcweb";
  /** Module created by "Play as guest" (`?module=`, default "arena"). */
  module: string;
  /** Bots added to a created game (`?bots=`, default 3). */
  bots: number;
  /**
   * Identity profile (`?player=`): each profile has its own device id, hence its own
   * guest account, so two tabs of one browser can be two players.
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
    return localStorage.getItem(key);
  } catch {
    return null; // storage disabled: fall back to a per-page identity
  }
}

function storageSet(key: string, value: string): void {
  try {
    localStorage.setItem(key, value);
  } catch {
    // ignore: see storageGet
  }
}

/** The device id of a profile, created on first use and kept in localStorage. */
export function deviceId(profile: string): string {
  const key = profile ? `ludus.device.${profile}` : "ludus.device";
  let id = storageGet(key);
  if (!id || !/^[A-Za-z0-9_-]{16,128}$/.test(id)) {
    id = randomId(32);
    storageSet(key, id);
  }
  return id;
}

export const savedName = {
  get: (): string => storageGet("ludus.name") ?? "",
  set: (name: string): void => storageSet("ludus.name", name),
};

/** Renew the ticket this long before it expires. */
const RENEW_BEFORE_MS = 30_000;
/** Ticket lifetime assumed when the server does not say. */
const DEFAULT_TICKET_MS = 120_000;
const RETRY_LOGIN_MS = 5_000;

/**
 * Session holds the current guest ticket, renews it before it expires and provides the
 * game client; every call carries the ticket current at the time of the call.
 */
export class Session {
  readonly game: GameClient;
  ticket = "";
  accountId = "";
  displayName = "";
  /** Called after each successful login or renewal, and with the error of a failed one. */
  onChange: (err?: unknown) => void = () => {};

  private readonly auth: Client<typeof AuthService>;
  private readonly device: string;
  private renewTimer = 0;
  private pending: Promise<void> | null = null;
  private pendingName = "";

  constructor(private readonly cfg: Config) {
    const bearer: Interceptor = (next) => async (req) => {
      const ticket = this.ticket;
      if (!ticket || req.service.typeName === AuthService.typeName) return next(req);
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
    this.device = deviceId(cfg.profile);
  }

  get loggedIn(): boolean {
    return this.ticket !== "";
  }

  /**
   * Signs in as the guest of this device (same account every time, fresh ticket) and
   * schedules the renewal. Concurrent calls with the same name share one request.
   */
  login(displayName = savedName.get()): Promise<void> {
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
    try {
      const res = await this.auth.guestLogin({
        tenant: this.cfg.tenant,
        deviceId: this.device,
        displayName: displayName.trim().slice(0, 32),
      });
      this.ticket = res.ticket;
      this.accountId = res.accountId;
      this.displayName = res.displayName;
      const expires = res.expiresAt ? timestampMs(res.expiresAt) : Date.now() + DEFAULT_TICKET_MS;
      const delay = Math.max(RETRY_LOGIN_MS, expires - Date.now() - RENEW_BEFORE_MS);
      this.renewTimer = window.setTimeout(() => void this.login().catch(() => {}), delay);
      this.onChange();
    } catch (err) {
      // Keep the old ticket (it may still be valid) and try again shortly.
      this.renewTimer = window.setTimeout(() => void this.login().catch(() => {}), RETRY_LOGIN_MS);
      this.onChange(err);
      throw err;
    }
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

export function isCanceled(err: unknown): boolean {
  return ConnectError.from(err).code === Code.Canceled;
}
