package backend

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/auth"
	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/internal/bearer"
	"ludus.dev/ludus/sdk/abi"
)

// FleetView is the backend's read-only view of the running fleet (implemented
// elsewhere, over etcd).
type FleetView interface {
	ListNodes(ctx context.Context) ([]*ludusv1.Node, error)
	// ListGames lists a tenant's games, each with its build and state
	// (DeleteModule refuses the build of one not "ended" or "failed").
	ListGames(ctx context.Context, tenantID string) ([]*ludusv1.GameInfo, error)
	// ActiveBatchBuilds maps each of a tenant's batch runs that have not
	// ended (admitting or running) to the build its games play.
	ActiveBatchBuilds(ctx context.Context, tenantID string) (map[string]string, error)
}

// Config configures a Server.
type Config struct {
	// Store keeps all state. Required. The Server does not close it.
	Store store.Store
	// ClusterToken is the cluster's root secret: gateways and fleet control
	// present it to ModuleStoreService and may call all of it. Sim nodes
	// present their node credential, derived from it (package
	// auth/clustercred), and may only do what a node does: fetch modules,
	// archive games, report usage and play batch games; a node
	// still given the cluster token itself is accepted as before, with all
	// its power. Empty disables that service. At least 16 characters.
	ClusterToken string
	// RequireRoster makes match reports credit only accounts on the match's
	// roster (ModuleStoreService.AddMatchPlayers) even for a match whose
	// roster is empty. Off, a match without a roster credits any account of
	// its tenant, as before rosters existed; a match with one is always
	// checked. Turn it on once every gateway registers rosters.
	RequireRoster bool
	// OperatorKey is an API key with power over all tenants (CreateTenant,
	// ListTenants). Empty disables it. At least 16 characters.
	OperatorKey string
	// ValidateModule compiles and checks a module and returns its metadata.
	// Its error text is shown to the uploader. Required.
	ValidateModule func(ctx context.Context, wasm []byte) (abi.Meta, error)
	// Fleet answers ListGames and ListNodes, and tells DeleteModule which
	// builds live games and batch runs use; nil makes them Unavailable.
	Fleet FleetView
	// Now is the clock; time.Now if nil.
	Now func() time.Time
	// Logger gets server-side errors; slog.Default() if nil.
	Logger *slog.Logger
	// PasswordParams are the argon2id parameters of new password hashes;
	// nil means DefaultPasswordParams (OWASP's). Lower them only in tests.
	PasswordParams *PasswordParams
	// PasswordWorkers is how many password hashes and checks (argon2id: 19
	// MiB and about 25 ms of a core each) run at once; a sign-in beyond
	// them waits up to 2 s for a turn, then gets Unavailable. Zero means
	// GOMAXPROCS. It bounds the memory and CPU that callers who need no
	// account (EmailLogin of unknown emails costs a full check) can take.
	PasswordWorkers int
	// passwordWait overrides the 2 s (tests).
	passwordWait time.Duration
	// keySyncGap overrides keySyncMinGap (tests).
	keySyncGap time.Duration
	// moduleBound overrides store.DefaultModuleBound (tests).
	moduleBound store.ModuleBound
	// exportMaxBytes overrides MaxExportBytes (tests).
	exportMaxBytes int

	// BatchRunBytes bounds the bytes of one batch run's stored results
	// (results, kept logs and error texts); zero means
	// store.DefaultBatchRunBytes. Past it a game's log is not kept, then
	// its result is not either (its record says so).
	BatchRunBytes int64
	// WebhookClient posts webhooks. Nil builds one with a 10 s timeout that
	// refuses non-public addresses (see AllowPrivateWebhooks) on every
	// connection it dials. A client given here is used as it is (redirects
	// are never followed): it must make that check itself.
	WebhookClient *http.Client
	// AllowPrivateWebhooks lets webhook URLs point at loopback, private,
	// link-local and other non-public addresses. Off, SetWebhook refuses
	// them and deliveries never connect to them (checked on the address
	// dialled, so DNS rebinding does not get around it): a tenant's webhook
	// must not reach the operator's own network. For development only.
	AllowPrivateWebhooks bool

	// SignupsPerAddress throttles account creation per client address
	// (IPv6: per /64): new guest accounts (GuestLogin of an unknown device)
	// and RegisterEmail. Zero means DefaultSignupsPerAddress; NoLimit turns
	// it off. Sign-ins of existing accounts are not throttled by it
	// (SignInsPerAccount is their limit).
	SignupsPerAddress RateLimit
	// SignupsPerTenant throttles account creation per tenant: the above plus
	// accounts CustomLogin and CreateAccount create. Zero means
	// DefaultSignupsPerTenant; NoLimit turns it off.
	SignupsPerTenant RateLimit
	// SignInsPerAccount throttles sign-ins to existing accounts, per
	// account (by the device, email or custom id it signs in with, in
	// each backend process): GuestLogin of a known device, EmailLogin and
	// CustomLogin. Zero means DefaultSignInsPerAccount; NoLimit turns it
	// off. Refresh is not counted: it continues a session, whose stored
	// tokens are bounded (store.RefreshReuseMemory).
	SignInsPerAccount RateLimit
	// LeaderboardReadsPerAccount throttles each player's GetLeaderboard
	// calls (in each backend process). Zero means
	// DefaultLeaderboardReadsPerAccount; NoLimit turns it off. Admin reads
	// (GetAdminLeaderboard) are not limited.
	LeaderboardReadsPerAccount RateLimit
	// TrustedProxies are the peers whose X-Forwarded-For header names the
	// client (the gateway in front of the backend). Nil means loopback only
	// (127.0.0.0/8 and ::1, where `ludus dev` runs its gateway); an empty
	// slice trusts no one. From any other peer the peer address is the
	// client's.
	TrustedProxies []netip.Prefix

	// lookupIP resolves webhook hosts at SetWebhook (tests replace it; nil:
	// net.DefaultResolver).
	lookupIP func(ctx context.Context, host string) ([]netip.Addr, error)
}

// minSecretLen is the least length of the operator key and cluster token.
const minSecretLen = 16

// Server is the backend service.
type Server struct {
	store          store.Store
	validate       func(ctx context.Context, wasm []byte) (abi.Meta, error)
	fleet          FleetView
	moduleBound    store.ModuleBound // each tenant's stored builds
	now            func() time.Time
	log            *slog.Logger
	keys           *auth.KeySet
	issuer         *auth.Issuer
	operatorHash   *[32]byte // nil: operator key disabled
	clusterHash    *[32]byte // nil: module store disabled
	clusterToken   string    // node credentials derive from it
	requireRoster  bool      // reports credit rostered accounts only, always
	handler        http.Handler
	rotateInFlight chan struct{} // one rotation or key sync at a time
	keySynced      atomic.Int64  // unix nanos of the last read of the signing keys
	keySyncGap     time.Duration // the least time between reads that requests trigger
	pwParams       PasswordParams
	dummyHash      string // checked against for unknown emails, to equalize timing
	pwTurns        chan struct{}
	pwWait         time.Duration
	exportMax      int           // MaxExportBytes, or a test's bound
	batchRunBytes  int64         // Config.BatchRunBytes or its default
	exportTurns    chan struct{} // exports running at once (exportsAtOnce)
	webhookClient  *http.Client
	allowPrivate   bool // webhooks may reach non-public addresses
	lookupIP       func(ctx context.Context, host string) ([]netip.Addr, error)
	signupsByAddr  *limiter // nil: no limit
	signupsByTen   *limiter // nil: no limit
	signIns        *limiter // sign-ins to existing accounts; nil: no limit
	boardReads     *limiter // players' leaderboard reads; nil: no limit
	trusted        []netip.Prefix
	verifier       *auth.Verifier // shared, so its cache of verified tickets is
	tenants        sync.Map       // slug -> store.Tenant (tenants are never renamed or deleted)
	rules          sync.Map       // tenant id -> cachedRules
}

// New creates a Server, loading the ticket signing keys from the store (and
// creating the first key on a fresh store).
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("backend: Config.Store is required")
	}
	if cfg.ValidateModule == nil {
		return nil, errors.New("backend: Config.ValidateModule is required")
	}
	s := &Server{
		store:          cfg.Store,
		validate:       cfg.ValidateModule,
		fleet:          cfg.Fleet,
		moduleBound:    cfg.moduleBound,
		now:            cfg.Now,
		log:            cfg.Logger,
		rotateInFlight: make(chan struct{}, 1),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.moduleBound == (store.ModuleBound{}) {
		s.moduleBound = store.DefaultModuleBound
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.pwParams = DefaultPasswordParams
	if cfg.PasswordParams != nil {
		s.pwParams = *cfg.PasswordParams
	}
	s.dummyHash = hashPassword(s.pwParams, "dummy password")
	workers := cfg.PasswordWorkers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	s.pwTurns = make(chan struct{}, workers)
	s.pwWait = cmp.Or(cfg.passwordWait, 2*time.Second)
	s.keySyncGap = cmp.Or(cfg.keySyncGap, keySyncMinGap)
	s.exportMax = cmp.Or(cfg.exportMaxBytes, MaxExportBytes)
	s.batchRunBytes = cmp.Or(cfg.BatchRunBytes, store.DefaultBatchRunBytes)
	s.exportTurns = make(chan struct{}, exportsAtOnce)
	s.allowPrivate = cfg.AllowPrivateWebhooks
	s.webhookClient = newWebhookClient(cfg.WebhookClient, s.allowPrivate)
	s.lookupIP = cfg.lookupIP
	if s.lookupIP == nil {
		s.lookupIP = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	s.signupsByAddr = newLimiter(cfg.SignupsPerAddress, DefaultSignupsPerAddress)
	s.signupsByTen = newLimiter(cfg.SignupsPerTenant, DefaultSignupsPerTenant)
	s.signIns = newLimiter(cfg.SignInsPerAccount, DefaultSignInsPerAccount)
	s.boardReads = newLimiter(cfg.LeaderboardReadsPerAccount, DefaultLeaderboardReadsPerAccount)
	s.trusted = cfg.TrustedProxies
	if s.trusted == nil {
		s.trusted = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	}
	s.requireRoster = cfg.RequireRoster
	for _, sec := range []struct {
		name, value string
		hash        **[32]byte
	}{
		{"OperatorKey", cfg.OperatorKey, &s.operatorHash},
		{"ClusterToken", cfg.ClusterToken, &s.clusterHash},
	} {
		if sec.value == "" {
			continue
		}
		if len(sec.value) < minSecretLen {
			return nil, fmt.Errorf("backend: Config.%s must be at least %d characters", sec.name, minSecretLen)
		}
		h := bearer.HashOf(sec.value)
		*sec.hash = &h
	}
	if s.clusterHash != nil {
		s.clusterToken = cfg.ClusterToken
	}
	if s.clusterHash == nil {
		s.log.Warn("backend: no cluster token configured; ModuleStoreService rejects every call")
	}
	if err := s.loadKeys(ctx); err != nil {
		return nil, err
	}
	s.issuer = auth.NewIssuer(s.keys, s.now)
	s.verifier = auth.NewVerifier(syncingKeys{s}, s.now)
	s.handler = s.buildHandler()
	return s, nil
}

// Handler returns the HTTP handler serving every service of the backend.
func (s *Server) Handler() http.Handler { return s.handler }

// Issuer returns the ticket issuer (for in-process use and tests).
func (s *Server) Issuer() *auth.Issuer { return s.issuer }

// KeySet returns the live signing key set; it is also an auth.KeySource.
func (s *Server) KeySet() *auth.KeySet { return s.keys }

// Verifier returns the ticket verifier over the live key set (with its cache
// of verified tickets), for a gateway running in the same process.
func (s *Server) Verifier() *auth.Verifier { return s.verifier }

func (s *Server) buildHandler() http.Handler {
	common := []connect.HandlerOption{
		// gzip is on by default; only compress responses worth it.
		connect.WithCompressMinBytes(1 << 10),
		connect.WithRecover(func(ctx context.Context, spec connect.Spec, _ http.Header, p any) error {
			s.log.ErrorContext(ctx, "backend: panic in handler", "procedure", spec.Procedure, "panic", p)
			return connect.NewError(connect.CodeInternal, errors.New("internal error"))
		}),
	}
	// Each service reads at most what its largest valid request needs
	// (connect-go refuses more with ResourceExhausted before decoding, and
	// counts decompressed bytes too): an anonymous caller cannot make the
	// backend buffer a module-sized message.
	limit := func(n int) []connect.HandlerOption {
		return append([]connect.HandlerOption{connect.WithReadMaxBytes(n)}, common...)
	}
	mux := http.NewServeMux()
	mux.Handle(ludusv1connect.NewAuthServiceHandler(&authService{s}, limit(MaxAuthRequestBytes)...))
	mux.Handle(ludusv1connect.NewAdminServiceHandler(&adminService{s}, limit(MaxAdminRequestBytes)...))
	// UploadModule alone takes a module: the same service again, with the
	// module limit, serves that one procedure (the longer pattern wins).
	_, upload := ludusv1connect.NewAdminServiceHandler(&adminService{s}, limit(MaxRequestBytes)...)
	mux.Handle(ludusv1connect.AdminServiceUploadModuleProcedure, upload)
	// The cluster service takes game log archives of up to MaxArchiveBytes.
	mux.Handle(clusterv1connect.NewModuleStoreServiceHandler(&moduleStore{s}, limit(maxArchiveRequestBytes)...))
	mux.Handle(ludusv1connect.NewProgressionServiceHandler(&progressionService{s}, limit(MaxProgressionRequestBytes)...))
	mux.Handle(ludusv1connect.NewQuotaServiceHandler(&quotaService{s}, limit(64<<10)...))
	mux.Handle(ludusv1connect.NewQuotaClusterServiceHandler(&quotaCluster{s}, limit(1<<20)...))
	mux.Handle(ludusv1connect.NewMatchReportServiceHandler(&matchReports{s}, limit(MaxReportRequestBytes)...))
	// Sim nodes' batch workers: batchworker.go.
	s.mountBatchWorker(mux, common)
	mux.HandleFunc("GET "+BatchArchivePathPrefix+"{tenant}/{run}", s.serveBatchArchive) // batchlinks.go
	mux.HandleFunc("GET /.well-known/jwks.json", func(w http.ResponseWriter, r *http.Request) {
		// Gateways ask on a kid they do not know: it may be a key another
		// replica just rotated to (keys.go).
		s.syncKeysSoon(r.Context())
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Header().Set("Cache-Control", "public, max-age=60")
		w.Write(s.keys.PublicJWKS())
	})
	return mux
}

// internal logs err and returns the error a client sees for it: Canceled or
// DeadlineExceeded if the call's context ended, else Internal "internal error".
func (s *Server) internal(ctx context.Context, op string, err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, context.Canceled)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, context.DeadlineExceeded)
	case errors.Is(err, store.ErrInvalid):
		return connect.NewError(connect.CodeInvalidArgument, errors.New("a value is too long or contains characters that cannot be stored"))
	}
	s.log.ErrorContext(ctx, "backend: "+op, "err", err)
	return connect.NewError(connect.CodeInternal, errors.New("internal error"))
}

func invalidArg(err error) error { return connect.NewError(connect.CodeInvalidArgument, err) }

// newID returns a random id: prefix + 16 random bytes in lowercase base32.
func newID(prefix string) string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return prefix + strings.ToLower(b32.EncodeToString(b[:]))
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// APIKeyPrefix starts every API key the backend issues.
const APIKeyPrefix = "lds_"

// newAPIKey returns a fresh API key and its hash.
func newAPIKey() (key string, hash []byte) { return newSecret(APIKeyPrefix) }

// newSecret returns prefix + 32 random bytes in base64url, and its SHA-256.
func newSecret(prefix string) (secret string, hash []byte) {
	var b [32]byte
	rand.Read(b[:])
	secret = prefix + base64.RawURLEncoding.EncodeToString(b[:])
	return secret, hashSecret(secret)
}

func hashSecret(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// EnsureTenant returns the id of the tenant with this slug, creating it (with
// no API key) if needed. `ludus dev` uses it to seed a demo tenant.
func (s *Server) EnsureTenant(ctx context.Context, slug, name string) (tenantID string, err error) {
	if err := checkSlug("slug", slug); err != nil {
		return "", err
	}
	if name, err = cleanName("name", name, MaxTenantNameLen); err != nil {
		return "", err
	}
	if name == "" {
		name = slug
	}
	for range 2 {
		t, err := s.store.TenantBySlug(ctx, slug)
		if err == nil {
			return t.ID, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return "", fmt.Errorf("backend: ensure tenant %q: %w", slug, err)
		}
		t = store.Tenant{ID: newID("t_"), Slug: slug, Name: name, CreatedAt: s.now().UTC()}
		err = s.store.CreateTenant(ctx, t)
		if err == nil {
			return t.ID, nil
		}
		if !errors.Is(err, store.ErrAlreadyExists) {
			return "", fmt.Errorf("backend: ensure tenant %q: %w", slug, err)
		}
		// Created concurrently: look it up again.
	}
	return "", fmt.Errorf("backend: ensure tenant %q: lost a race twice", slug)
}

// EnsureModule stores wasm under name for the tenant unless it already is the
// newest build of that name, and returns its build id. Same bytes, same build
// id, nothing stored twice. Invalid modules are rejected like UploadModule does.
func (s *Server) EnsureModule(ctx context.Context, tenantID, name string, wasm []byte) (buildID string, err error) {
	m, err := s.putModule(ctx, tenantID, name, wasm, true)
	if err != nil {
		return "", err
	}
	return m.BuildID, nil
}
