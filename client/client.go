package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/simnode/engine"
)

// ErrNotSignedIn is returned by calls that need a session ticket before
// GuestLogin (or UseSession) succeeded.
var ErrNotSignedIn = errors.New("client: not signed in: call GuestLogin first")

// refreshMargin: a ticket with less than this left is refreshed before use.
// Tickets live 120 s.
const refreshMargin = 30 * time.Second

// Client talks to one gateway on behalf of one player. It is safe for
// concurrent use. Its wazero engine and the modules it compiled are shared by
// all its sessions; Close releases them.
type Client struct {
	base  string
	hc    *http.Client
	auth  ludusv1connect.AuthServiceClient
	games ludusv1connect.GameServiceClient
	match ludusv1connect.MatchmakingServiceClient
	cfg   config
	// pingRegion is the region the gateway's last Ping named.
	pingRegion atomic.Pointer[string]

	authMu  sync.Mutex // serialises logins and refreshes (a refresh token works once)
	sessMu  sync.Mutex // guards the fields below
	account Account
	ticket  string
	expires time.Time
	refresh string
	device  string // the guest device id, to log in again if a refresh fails

	engMu sync.Mutex
	eng   *engine.Engine

	modMu   sync.Mutex
	modules map[string]*engine.Module // compiled, by build id
	loading map[string]*moduleLoad

	// openRenderer makes the renderers of snapshot sessions (by default the
	// module's ludus_render in wazero); tests replace it.
	openRenderer func(ctx context.Context, buildID string) (frameRenderer, error)
}

// Account is the signed-in player.
type Account struct {
	ID          string
	DisplayName string
	Tenant      string // the tenant's slug, as given to GuestLogin
}

type config struct {
	hc          *http.Client
	cacheDir    string
	connectOpts []connect.ClientOption
	engineCfg   engine.Config
	tls         *tls.Config
	region      string
}

// Option configures a Client.
type Option func(*config)

// WithHTTPClient makes the client use hc for every call. Play needs HTTP/2:
// hc must speak h2c (prior knowledge) to http:// gateways, or HTTP/2 over TLS.
// The default is such a client.
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.hc = hc } }

// WithTLSConfig sets the TLS configuration (e.g. the roots to trust) of the
// default HTTP client for https:// gateways. Ignored with WithHTTPClient.
func WithTLSConfig(cfg *tls.Config) Option { return func(c *config) { c.tls = cfg } }

// WithRegion names the region of the gateway given to Dial, as the tenant's
// matchmaking rules name it: the key under which MeasureRTT reports its round
// trip. The default is DefaultRegion ("local", the region of `ludus dev`).
func WithRegion(region string) Option { return func(c *config) { c.region = region } }

// WithCompilationCache keeps the machine code wazero compiles from modules in
// dir, so a later process loads a module in milliseconds instead of compiling
// it for seconds. Without it compiled modules live in memory only.
func WithCompilationCache(dir string) Option { return func(c *config) { c.cacheDir = dir } }

// WithConnectOptions adds options to the generated Connect clients (the
// default protocol is gRPC; connect.WithProtocolConnect or WithGRPCWeb
// switch it).
func WithConnectOptions(opts ...connect.ClientOption) Option {
	return func(c *config) { c.connectOpts = append(c.connectOpts, opts...) }
}

// WithEngineConfig sets the wazero engine's limits for renderers (memory cap,
// per-call deadline); CacheDir is taken from WithCompilationCache.
func WithEngineConfig(cfg engine.Config) Option { return func(c *config) { c.engineCfg = cfg } }

// DefaultHTTPClient returns the HTTP client Dial uses for baseURL: HTTP/2
// without TLS (h2c, prior knowledge) for http:// URLs, so that Play works, and
// HTTP/2 negotiated by ALPN (falling back to HTTP/1.1) for https:// URLs.
func DefaultHTTPClient(baseURL string) *http.Client { return defaultHTTPClient(baseURL, nil) }

func defaultHTTPClient(baseURL string, tlsCfg *tls.Config) *http.Client {
	p := new(http.Protocols)
	t := &http.Transport{Protocols: p, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 4,
		// Pings find a dead connection (a half-open path) that carries a
		// stream nothing is sent on: it is closed and its streams fail.
		HTTP2: &http.HTTP2Config{SendPingTimeout: 15 * time.Second, PingTimeout: 15 * time.Second}}
	if strings.HasPrefix(baseURL, "https://") {
		p.SetHTTP1(true)
		p.SetHTTP2(true)
		if tlsCfg != nil {
			t.TLSClientConfig = tlsCfg.Clone()
		} else {
			t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	return &http.Client{Transport: t}
}

// Dial returns a client of the gateway at baseURL (e.g. http://127.0.0.1:8080).
// It does not connect until the first call.
func Dial(baseURL string, opts ...Option) *Client {
	base := strings.TrimRight(baseURL, "/")
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	hc := cfg.hc
	if hc == nil {
		hc = defaultHTTPClient(base, cfg.tls)
	}
	c := &Client{base: base, hc: hc, cfg: cfg, modules: map[string]*engine.Module{}, loading: map[string]*moduleLoad{}}
	copts := append([]connect.ClientOption{connect.WithGRPC()}, cfg.connectOpts...)
	c.auth = ludusv1connect.NewAuthServiceClient(hc, base, copts...)
	withTicket := append(slices.Clip(copts), connect.WithInterceptors(ticketInterceptor{c}))
	c.games = ludusv1connect.NewGameServiceClient(hc, base, withTicket...)
	c.match = ludusv1connect.NewMatchmakingServiceClient(hc, base, withTicket...)
	c.openRenderer = c.moduleRenderer
	return c
}

// BaseURL is the gateway's URL as given to Dial, without a trailing slash.
func (c *Client) BaseURL() string { return c.base }

// Close releases the wazero engine and every compiled module. Close sessions
// first.
func (c *Client) Close() error {
	c.engMu.Lock()
	defer c.engMu.Unlock()
	if c.eng == nil {
		return nil
	}
	err := c.eng.Close(context.Background())
	c.eng = nil
	c.modMu.Lock()
	c.modules = map[string]*engine.Module{}
	c.modMu.Unlock()
	return err
}

// NewDeviceID returns a random device id for GuestLogin (32 hex digits). Keep
// it to sign in as the same guest again, and keep one per tenant: the device
// id is all a guest signs in with, and a tenant's admin can read its guests'
// ids, so an id sent to two tenants lets either sign in as the other's guest.
func NewDeviceID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// GuestLogin signs in (creating on first use) the guest account of deviceID
// in tenant (its slug, e.g. "demo"). The client keeps the ticket fresh from
// then on: it refreshes it before it expires (AuthService.Refresh), or signs
// in again with the same device id if the refresh fails.
func (c *Client) GuestLogin(ctx context.Context, tenant, deviceID, displayName string) (Account, error) {
	c.authMu.Lock()
	defer c.authMu.Unlock()
	resp, err := c.auth.GuestLogin(ctx, connect.NewRequest(&ludusv1.GuestLoginRequest{
		Tenant: tenant, DeviceId: deviceID, DisplayName: displayName}))
	if err != nil {
		return Account{}, fmt.Errorf("guest login: %w", err)
	}
	m := resp.Msg
	acc := Account{ID: m.AccountId, DisplayName: m.DisplayName, Tenant: tenant}
	c.sessMu.Lock()
	c.account, c.ticket, c.refresh, c.device = acc, m.Ticket, m.RefreshToken, deviceID
	c.expires = expiry(m.ExpiresAt.AsTime())
	c.sessMu.Unlock()
	return acc, nil
}

// UseSession signs the client in with a session obtained elsewhere (email or
// custom login). The ticket is refreshed with the refresh token when it nears
// expiry; without a refresh token it is used until it expires. It waits for
// a login or refresh under way to finish.
func (c *Client) UseSession(tenant string, s *ludusv1.Session) {
	// authMu first, as in renew: a refresh under way would otherwise store
	// the previous account's ticket over this session.
	c.authMu.Lock()
	defer c.authMu.Unlock()
	c.sessMu.Lock()
	defer c.sessMu.Unlock()
	c.account = Account{ID: s.AccountId, DisplayName: s.DisplayName, Tenant: tenant}
	c.ticket, c.refresh, c.device = s.Ticket, s.RefreshToken, ""
	c.expires = expiry(s.ExpiresAt.AsTime())
}

// expiry is when a ticket must be replaced; a missing expiry counts as 120 s.
func expiry(t time.Time) time.Time {
	if t.IsZero() || t.Unix() <= 0 {
		return time.Now().Add(120 * time.Second)
	}
	return t
}

// Account returns the signed-in account (zero before a login).
func (c *Client) Account() Account {
	c.sessMu.Lock()
	defer c.sessMu.Unlock()
	return c.account
}

// Ticket returns a session ticket valid for at least a few more seconds,
// refreshing it first when it is about to expire.
func (c *Client) Ticket(ctx context.Context) (string, error) {
	c.sessMu.Lock()
	t, exp := c.ticket, c.expires
	c.sessMu.Unlock()
	if t == "" {
		return "", ErrNotSignedIn
	}
	if time.Until(exp) > refreshMargin {
		return t, nil
	}
	return c.renew(ctx, t)
}

// currentTicket is the ticket as it is, for calls that cannot refresh.
func (c *Client) currentTicket() string {
	c.sessMu.Lock()
	defer c.sessMu.Unlock()
	return c.ticket
}

// renew replaces the ticket stale (unless another call already did): with the
// refresh token, else by signing the guest in again.
func (c *Client) renew(ctx context.Context, stale string) (string, error) {
	c.authMu.Lock()
	defer c.authMu.Unlock()
	c.sessMu.Lock()
	acc, ticket, refresh, device, exp := c.account, c.ticket, c.refresh, c.device, c.expires
	c.sessMu.Unlock()
	if ticket != stale && time.Until(exp) > refreshMargin {
		return ticket, nil // renewed meanwhile
	}
	var errs []error
	if refresh != "" {
		resp, err := c.auth.Refresh(ctx, connect.NewRequest(&ludusv1.RefreshRequest{Tenant: acc.Tenant, RefreshToken: refresh}))
		if err == nil && resp.Msg.Session != nil {
			s := resp.Msg.Session
			c.sessMu.Lock()
			c.ticket, c.refresh, c.expires = s.Ticket, s.RefreshToken, expiry(s.ExpiresAt.AsTime())
			c.sessMu.Unlock()
			return s.Ticket, nil
		}
		errs = append(errs, fmt.Errorf("refresh: %w", err))
	}
	if device != "" {
		resp, err := c.auth.GuestLogin(ctx, connect.NewRequest(&ludusv1.GuestLoginRequest{
			Tenant: acc.Tenant, DeviceId: device, DisplayName: acc.DisplayName}))
		if err == nil {
			m := resp.Msg
			c.sessMu.Lock()
			c.ticket, c.refresh, c.expires = m.Ticket, m.RefreshToken, expiry(m.ExpiresAt.AsTime())
			c.sessMu.Unlock()
			return m.Ticket, nil
		}
		errs = append(errs, fmt.Errorf("guest login: %w", err))
	}
	if time.Until(exp) > 0 {
		return ticket, nil // not renewable yet still valid: use it
	}
	if len(errs) == 0 {
		errs = append(errs, errors.New("the ticket expired and there is no refresh token"))
	}
	return "", errors.Join(errs...)
}

// expireTicket makes the next Ticket call renew the ticket (after the gateway
// answered Unauthenticated).
func (c *Client) expireTicket(stale string) {
	c.sessMu.Lock()
	defer c.sessMu.Unlock()
	if c.ticket == stale {
		c.expires = time.Now()
	}
}

// ticketInterceptor puts the session ticket on every GameService and
// MatchmakingService call; unary calls refresh it first when needed (streams
// are opened after Ticket).
type ticketInterceptor struct{ c *Client }

func (t ticketInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		ticket, err := t.c.Ticket(ctx)
		if err != nil {
			return nil, connect.NewError(connect.CodeUnauthenticated, err)
		}
		req.Header().Set("Authorization", "Bearer "+ticket)
		resp, err := next(ctx, req)
		if connect.CodeOf(err) == connect.CodeUnauthenticated {
			t.c.expireTicket(ticket)
		}
		return resp, err
	}
}

func (t ticketInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+t.c.currentTicket())
		return conn
	}
}

func (t ticketInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// Games returns the generated GameService client, with the ticket attached to
// every call, for what this package does not wrap (ListGames, Spectate,
// StreamFrames, SendInput, Ping).
func (c *Client) Games() ludusv1connect.GameServiceClient { return c.games }

// CreateGame starts a match of the tenant's module (e.g. "arena") with bots
// bot players.
func (c *Client) CreateGame(ctx context.Context, module string, bots int) (*ludusv1.GameInfo, error) {
	resp, err := c.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: module, Bots: int32(bots)}))
	if err != nil {
		return nil, fmt.Errorf("create game: %w", err)
	}
	return resp.Msg.Game, nil
}

// Join takes (or finds again: joining twice returns the same slot) the
// player's slot in a game.
func (c *Client) Join(ctx context.Context, gameID string) (game *ludusv1.GameInfo, slot int, err error) {
	resp, err := c.games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: gameID}))
	if err != nil {
		return nil, 0, fmt.Errorf("join game %s: %w", gameID, err)
	}
	return resp.Msg.Game, int(resp.Msg.Slot), nil
}

// Ping measures the round-trip time to the gateway.
func (c *Client) Ping(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	resp, err := c.games.Ping(ctx, connect.NewRequest(&ludusv1.PingRequest{ClientUnixNanos: t0.UnixNano()}))
	if err != nil {
		return 0, err
	}
	d := time.Since(t0)
	if r := resp.Msg.Region; r != "" {
		c.pingRegion.Store(&r)
	}
	return d, nil
}
