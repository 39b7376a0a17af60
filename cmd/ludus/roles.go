package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"ludus.dev/ludus/auth"
	"ludus.dev/ludus/auth/clustercred"
	"ludus.dev/ludus/backend"
	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/backend/store/postgres"
	"ludus.dev/ludus/backend/store/sqlite"
	"ludus.dev/ludus/batch"
	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/gateway"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/matchmaker"
	"ludus.dev/ludus/ops/fleet"
	"ludus.dev/ludus/simnode"
	"ludus.dev/ludus/simnode/engine"
	"ludus.dev/ludus/web"
)

// etcdFlags are the flags every role uses to reach an external etcd cluster.
type etcdFlags struct {
	endpoints *string
	user      *string
	password  *string
	cacert    *string
	cert      *string
	key       *string
}

// secretFlags are the flags that hold secrets. Their defaults come from the
// environment, and Go's usage text, printed for -h and on every mistyped
// flag, shows a flag's default: hideSecretDefaults keeps them out of it.
var secretFlags = map[string]string{
	"cluster-token":       "LUDUS_CLUSTER_TOKEN",
	"operator-key":        "LUDUS_OPERATOR_KEY",
	"postgres":            "LUDUS_POSTGRES",
	"node-credential":     "LUDUS_NODE_CREDENTIAL",
	"node-enrollment-key": "LUDUS_NODE_ENROLLMENT_KEY",
	"etcd-password":       "LUDUS_ETCD_PASSWORD",
}

// hideSecretDefaults makes fs's usage text say where a secret flag's default
// comes from instead of showing it. Call it once fs's flags are defined.
func hideSecretDefaults(fs *flag.FlagSet) {
	for name, env := range secretFlags {
		if f := fs.Lookup(name); f != nil && f.DefValue != "" {
			f.DefValue = ""
			f.Usage += " (default: $" + env + ", not shown)"
		}
	}
}

func addEtcdFlags(fs *flag.FlagSet) etcdFlags {
	return etcdFlags{
		endpoints: fs.String("etcd", envOr("LUDUS_ETCD", "http://127.0.0.1:2379"), "comma-separated etcd endpoints"),
		user:      fs.String("etcd-user", os.Getenv("LUDUS_ETCD_USER"), "etcd user (optional)"),
		password:  fs.String("etcd-password", os.Getenv("LUDUS_ETCD_PASSWORD"), "etcd password (optional)"),
		cacert:    fs.String("etcd-cacert", os.Getenv("LUDUS_ETCD_CACERT"), "CA bundle that signed the etcd servers' certificates (TLS)"),
		cert:      fs.String("etcd-cert", os.Getenv("LUDUS_ETCD_CERT"), "client certificate for etcd (mutual TLS)"),
		key:       fs.String("etcd-key", os.Getenv("LUDUS_ETCD_KEY"), "client key for etcd (mutual TLS)"),
	}
}

// tlsConfig builds the TLS configuration for etcd, or nil for plaintext.
func (f etcdFlags) tlsConfig() (*tls.Config, error) {
	if *f.cacert == "" && *f.cert == "" && *f.key == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if *f.cacert != "" {
		pem, err := os.ReadFile(*f.cacert)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--etcd-cacert %s holds no PEM certificate", *f.cacert)
		}
		cfg.RootCAs = pool
	}
	if (*f.cert == "") != (*f.key == "") {
		return nil, errors.New("--etcd-cert and --etcd-key go together")
	}
	if *f.cert != "" {
		pair, err := tls.LoadX509KeyPair(*f.cert, *f.key)
		if err != nil {
			return nil, fmt.Errorf("etcd client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

func (f etcdFlags) client() (*clusterstate.Client, error) {
	tlsCfg, err := f.tlsConfig()
	if err != nil {
		return nil, err
	}
	return clusterstate.Dial(clusterstate.DialConfig{
		TLS:       tlsCfg,
		Endpoints: strings.Split(*f.endpoints, ","),
		Username:  *f.user,
		Password:  *f.password,
	})
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// serveUntilDone serves h on addr (HTTP/1.1 and h2c) until ctx is done, then
// shuts down gracefully. Request bodies are under gateway.GuardBodies: a unary
// call's body must arrive within bodyTimeout (plus 1/gateway.MinBodyRate s per
// byte), and garbled envelopes are InvalidArgument.
func serveUntilDone(ctx context.Context, addr string, h http.Handler, bodyTimeout time.Duration, logger *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return serveOn(ctx, ln, h, bodyTimeout, logger)
}

// serveOn is serveUntilDone on a listener.
func serveOn(ctx context.Context, ln net.Listener, h http.Handler, bodyTimeout time.Duration, logger *slog.Logger) error {
	return gateway.Serve(ctx, ln, gateway.GuardBodies(h, bodyTimeout), nil, logger)
}

// serveOperator serves h, the operator's endpoints (metrics), on addr until
// ctx is done; stop waits for it to shut down. An empty addr serves nothing.
func serveOperator(ctx context.Context, addr string, h http.Handler, logger *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		log := logger.With("listener", "operator")
		if err := gateway.Serve(ctx, ln, gateway.GuardBodies(h, gateway.DefaultBodyReadTimeout), nil, log); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("operator listener failed", "err", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}

// metricsAddrFlag adds --metrics-addr: where the role serves its Prometheus
// metrics, apart from the port clients call.
func metricsAddrFlag(fs *flag.FlagSet, what string) *string {
	return fs.String("metrics-addr", os.Getenv("LUDUS_METRICS_ADDR"),
		"address of the operator listener serving GET /metrics ("+what+"), e.g. 127.0.0.1:9464; empty: none. "+
			"Series are labelled by tenant: keep it on loopback or the operators' network")
}

// bodyTimeoutFlag adds --body-timeout; 0 or negative turns the deadline off
// (the value returned is then negative).
func bodyTimeoutFlag(fs *flag.FlagSet) func() time.Duration {
	d := fs.Duration("body-timeout", gateway.DefaultBodyReadTimeout,
		"how long the request body of a unary call may take to arrive (plus 1 s per 64 KiB received); 0: no limit")
	return func() time.Duration {
		if *d <= 0 {
			return -1
		}
		return *d
	}
}

// parsePrefixes parses comma-separated addresses and CIDR prefixes: "" is nil
// (backend.Config's default, loopback), "none" an empty list.
func parsePrefixes(s string) ([]netip.Prefix, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := []netip.Prefix{}
	if strings.TrimSpace(s) == "none" {
		return out, nil
	}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("%q is neither an address nor a CIDR prefix", f)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

func required(fs *flag.FlagSet, names ...string) error {
	for _, n := range names {
		if fs.Lookup(n).Value.String() == "" {
			return fmt.Errorf("--%s is required", n)
		}
	}
	return nil
}

func runBackend(ctx context.Context, args []string, logger *slog.Logger) error {
	fs := flag.NewFlagSet("backend", flag.ContinueOnError)
	ef := addEtcdFlags(fs)
	listen := fs.String("listen", "127.0.0.1:8081", "listen address")
	data := fs.String("data", "ludus-backend", "directory of the SQLite database and the compilation cache")
	token := fs.String("cluster-token", os.Getenv("LUDUS_CLUSTER_TOKEN"), "shared secret of the cluster's roles")
	opKey := fs.String("operator-key", os.Getenv("LUDUS_OPERATOR_KEY"), "operator API key (tenant management)")
	pg := fs.String("postgres", os.Getenv("LUDUS_POSTGRES"), "PostgreSQL DSN; empty stores in SQLite under --data")
	bodyTimeout := bodyTimeoutFlag(fs)
	batchWorkers := fs.Int("batch-workers", 0, "batch games this backend plays at once (ludus ctl batch); 0: none here")
	noRoster := fs.Bool("no-roster", false, "accept match results for accounts not registered on the match's roster (gateways older than this backend do not register rosters)")
	proxies := fs.String("trusted-proxies", os.Getenv("LUDUS_TRUSTED_PROXIES"),
		`comma-separated addresses or CIDR prefixes of the gateways: their X-Forwarded-For names the client whose sign-ups are throttled; empty: loopback only; "none": no one`)
	hideSecretDefaults(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := required(fs, "cluster-token"); err != nil {
		return err
	}
	trusted, err := parsePrefixes(*proxies)
	if err != nil {
		return fmt.Errorf("--trusted-proxies: %w", err)
	}
	cli, err := ef.client()
	if err != nil {
		return err
	}
	defer cli.Close()
	if err := os.MkdirAll(*data, 0o700); err != nil {
		return err
	}
	eng, err := engine.New(ctx, engine.Config{CacheDir: filepath.Join(*data, "wazero-cache")})
	if err != nil {
		return err
	}
	defer eng.Close(context.Background())
	// Every upload is compiled to check it, and wazero writes each to the
	// cache on disk: keep that within its bound.
	go func() {
		t := time.NewTicker(5 * time.Minute)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if k, err := eng.PruneCache(0); err != nil || k > 0 {
					logger.Info("pruned the compilation cache", "files", k, "err", err)
				}
			}
		}
	}()
	var st store.Store
	if *pg != "" {
		p, err := postgres.Open(ctx, *pg)
		if err != nil {
			return err
		}
		defer p.Close()
		st = p
	} else {
		s, err := sqlite.Open(ctx, filepath.Join(*data, "ludus.db"))
		if err != nil {
			return err
		}
		defer s.Close()
		st = s
	}
	srv, err := backend.New(ctx, backend.Config{
		Store: st, ClusterToken: *token, OperatorKey: *opKey, ValidateModule: eng.Validate,
		Fleet: fleet.Admin{View: cli.View()}, Logger: logger.With("role", "backend"),
		TrustedProxies: trusted, RequireRoster: !*noRoster,
	})
	if err != nil {
		return err
	}
	go srv.RunWebhooks(ctx, time.Second)
	go srv.RunSweeps(ctx, backend.SweepInterval)
	control := &fleet.Control{Etcd: cli, OperatorKey: *opKey, ClusterToken: *token,
		HTTPClient: &http.Client{Transport: gateway.H2CTransport()}}
	mux := http.NewServeMux()
	mux.Handle(control.Handler())
	mmAdmin, err := matchmaker.NewAdminService(cli, func(ctx context.Context, h http.Header) (string, error) {
		return srv.AuthorizeTenant(ctx, h, "MatchmakingAdminService", true)
	})
	if err != nil {
		return err
	}
	mux.Handle(ludusv1connect.NewMatchmakingAdminServiceHandler(mmAdmin))
	mux.Handle((&fleet.GameLogs{Etcd: cli, ClusterToken: *token, HTTPClient: &http.Client{Transport: gateway.H2CTransport()},
		Authorize: srv.AuthorizeTenant, Store: srv}).Handler())
	mux.Handle((&batch.Service{Etcd: cli, Backend: srv, Engine: eng, Authorize: srv.AuthorizeTenant,
		Logger: logger.With("role", "batch")}).Handler(connect.WithReadMaxBytes(1 << 20)))
	if *batchWorkers > 0 {
		if _, err := batch.StartWorker(ctx, batch.WorkerConfig{Etcd: cli, Backend: srv, Engine: eng,
			Concurrency: *batchWorkers, Logger: logger.With("role", "batch")}); err != nil {
			return err
		}
	} else {
		// Sim nodes play the games; the reaper, which records runs in this
		// backend's store, runs here (one at a time across backends, by
		// election).
		go batch.RunReaper(ctx, cli, srv, "", 0, batch.ReaperConfig{}, logger.With("role", "batch"))
	}
	mux.Handle("/", srv.Handler())
	return serveUntilDone(ctx, *listen, mux, bodyTimeout(), logger)
}

func runGateway(ctx context.Context, args []string, logger *slog.Logger) error {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	ef := addEtcdFlags(fs)
	listen := fs.String("listen", "127.0.0.1:8080", "listen address")
	backendURL := fs.String("backend", envOr("LUDUS_BACKEND", "http://127.0.0.1:8081"), "backend base URL")
	token := fs.String("cluster-token", os.Getenv("LUDUS_CLUSTER_TOKEN"), "shared secret of the cluster's roles")
	tlsCert := fs.String("tls-cert", os.Getenv("LUDUS_TLS_CERT"), "PEM certificate (chain) file: serve HTTPS with HTTP/2 and HTTP/1.1 (ALPN); empty serves plaintext HTTP/1.1 and h2c")
	tlsKey := fs.String("tls-key", os.Getenv("LUDUS_TLS_KEY"), "PEM private key file of --tls-cert")
	corsOrigins := fs.String("cors-origins", os.Getenv("LUDUS_CORS_ORIGINS"), `comma-separated browser origins allowed to call from other sites (e.g. "https://play.example.com", or "*"); empty: same origin only`)
	d := gateway.DefaultLimits
	maxStreams := fs.Int("max-streams-per-account", d.MaxStreamsPerAccount, "frame streams one account may hold open on this gateway (-1: no limit)")
	inputRate := fs.Float64("input-rate", d.InputsPerSecond, "inputs per second per account, sustained (-1: no limit)")
	inputBurst := fs.Int("input-burst", d.InputBurst, "inputs per account in a burst")
	searchRate := fs.Float64("matchmaking-rate", d.MatchmakingCallsPerSecond, "MatchmakingService calls (FindMatch, CreateParty) per second per account, sustained (-1: no limit)")
	searchBurst := fs.Int("matchmaking-burst", d.MatchmakingBurst, "MatchmakingService calls per account in a burst")
	gameRate := fs.Float64("game-rate", d.GamesPerMinute, "CreateGame calls per minute per account, sustained (-1: no limit)")
	gameBurst := fs.Int("game-burst", d.GamesBurst, "CreateGame calls per account in a burst")
	joinRate := fs.Float64("join-rate", d.JoinsPerMinute, "JoinGame calls per minute per account, sustained (-1: no limit)")
	joinBurst := fs.Int("join-burst", d.JoinsBurst, "JoinGame calls per account in a burst")
	maxMessage := fs.Int("max-message-bytes", d.MaxMessageBytes, "largest GameService request message read")
	maxAuth := fs.Int("max-auth-message-bytes", d.MaxAuthMessageBytes, "largest AuthService request body passed to the backend")
	maxAdmin := fs.Int("max-admin-message-bytes", d.MaxAdminMessageBytes, "largest AdminService (but UploadModule), FleetService and ProgressionService request body passed to the backend")
	maxUpload := fs.Int("max-upload-bytes", d.MaxUploadBytes, "largest AdminService.UploadModule request body passed to the backend")
	bodyTimeout := bodyTimeoutFlag(fs)
	metricsAddr := metricsAddrFlag(fs, "the gateway's, by tenant; also POST /autoscale, Agones' FleetAutoscaler webhook")
	af := addAutoscaleFlags(fs)
	region := fs.String("region", envOr("LUDUS_REGION", "local"), "region this gateway serves (told to clients by Ping; sim nodes of the same region take its matches)")
	matchmaking := fs.Bool("matchmaking", true, "serve MatchmakingService and be a matchmaker replica (stateless; any number may run)")
	shutdownDelay := fs.Duration("shutdown-delay", 5*time.Second, "on SIGTERM or interrupt, report NOT_SERVING and go on serving this long, while load balancers take the gateway out of rotation")
	shutdownGrace := fs.Duration("shutdown-grace", 20*time.Second, "then, with the listener closed, how long requests in flight get to finish; streams still open after it are cut (clients open them again through another gateway)")
	hideSecretDefaults(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := required(fs, "cluster-token"); err != nil {
		return err
	}
	if (*tlsCert == "") != (*tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if *shutdownDelay < 0 || *shutdownGrace <= 0 {
		return fmt.Errorf("--shutdown-delay %v and --shutdown-grace %v: want a delay of 0 or more and a grace period above 0", *shutdownDelay, *shutdownGrace)
	}
	var tlsConfig *tls.Config
	if *tlsCert != "" {
		var err error
		if tlsConfig, err = gateway.LoadTLS(*tlsCert, *tlsKey); err != nil {
			return err
		}
	}
	var origins []string
	for _, o := range strings.Split(*corsOrigins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			origins = append(origins, o)
		}
	}
	cli, err := ef.client()
	if err != nil {
		return err
	}
	defer cli.Close()
	h2c := &http.Client{Transport: gateway.H2CTransport()}
	jwks := auth.NewJWKSClient(*backendURL+"/.well-known/jwks.json", auth.WithHTTPClient(h2c))
	gw, err := gateway.New(gateway.Config{
		Etcd: cli, Verifier: auth.NewVerifier(jwks, nil), BackendURL: *backendURL,
		ClusterToken: *token, Web: web.Handler(), Logger: logger, CORSOrigins: origins,
		Admission: gateway.NewBackendAdmission(h2c, *backendURL, *token), Matchmaking: *matchmaking, Region: *region,
		Limits: gateway.Limits{MaxStreamsPerAccount: *maxStreams, InputsPerSecond: *inputRate,
			InputBurst: *inputBurst, MatchmakingCallsPerSecond: *searchRate, MatchmakingBurst: *searchBurst,
			GamesPerMinute: *gameRate, GamesBurst: *gameBurst, JoinsPerMinute: *joinRate, JoinsBurst: *joinBurst, MaxMessageBytes: *maxMessage, MaxAuthMessageBytes: *maxAuth,
			MaxAdminMessageBytes: *maxAdmin, MaxUploadBytes: *maxUpload, BodyReadTimeout: bodyTimeout()},
	})
	if err != nil {
		return err
	}
	defer gw.Close()
	go gw.RunUsage(ctx, backend.NewUsageReporter(h2c, *backendURL, *token, gateway.UsageReporterName(), logger))
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	operator, err := af.operatorHandler(gw.OperatorHandler(), gw.Registry(), freeSessionsSource(gw.Nodes), logger)
	if err != nil {
		ln.Close()
		return err
	}
	stopOperator, err := serveOperator(ctx, *metricsAddr, operator, logger)
	if err != nil {
		ln.Close()
		return err
	}
	defer stopOperator()
	return gateway.ServeUntil(ctx, ln, gw.Handler(), tlsConfig, logger, gateway.Shutdown{
		Unready: func() { gw.SetServing(false) }, Delay: *shutdownDelay, Grace: *shutdownGrace})
}

func runSimnode(ctx context.Context, args []string, logger *slog.Logger) error {
	fs := flag.NewFlagSet("simnode", flag.ContinueOnError)
	ef := addEtcdFlags(fs)
	listen := fs.String("listen", "127.0.0.1:7001", "listen address of the NodeService")
	advertise := fs.String("advertise", "", "base URL gateways use to reach this node (default http://LISTEN)")
	id := fs.String("id", "", "node id, unique in the fleet (default: the host name and port)")
	region := fs.String("region", "local", "region label")
	capacity := fs.Int("capacity", 64, "maximum number of games")
	ttl := fs.Duration("lease-ttl", 2*time.Second, "node lease TTL")
	backendURL := fs.String("backend", envOr("LUDUS_BACKEND", "http://127.0.0.1:8081"), "backend base URL (module store)")
	token := fs.String("cluster-token", os.Getenv("LUDUS_CLUSTER_TOKEN"), "the cluster's root secret (discouraged on a sim node: give it --node-credential instead)")
	nodeCred := fs.String("node-credential", os.Getenv("LUDUS_NODE_CREDENTIAL"), `this node's own credential ("ludus ctl node credential ID" derives it): it may fetch modules and archive games, and nothing else`)
	cache := fs.String("cache", "ludus-simnode-cache", "directory of the compilation cache")
	bodyTimeout := bodyTimeoutFlag(fs)
	metricsAddr := metricsAddrFlag(fs, "the node's, by tenant; when set, the NodeService port no longer serves /metrics")
	batchWorkers := fs.Int("batch-workers", 0, "batch games (ludus ctl batch) this node plays at once, below its live matches: they pause while a live tick starts late; 0: none here")
	enrollment := fs.String("node-enrollment-key", os.Getenv("LUDUS_NODE_ENROLLMENT_KEY"), `for fleets whose node ids are not known in advance (a Kubernetes Deployment): the node derives its own credential for its --id from this key ("ludus ctl node enrollment-key" prints it); it has every node's power and no more`)
	drainOnTerm := fs.Bool("drain-on-term", false, "on SIGTERM or interrupt, hand every game to other nodes before exiting (what a Kubernetes pod needs, with no preStop hook and no operator key)")
	drainTimeout := fs.Duration("drain-timeout", 4*time.Minute, "with --drain-on-term, the longest the drain may take; games still here then end as failed (\"node shutting down\")")
	hideSecretDefaults(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := 0
	for _, s := range []string{*nodeCred, *token, *enrollment} {
		if s != "" {
			given++
		}
	}
	switch {
	case *batchWorkers < 0:
		return fmt.Errorf("--batch-workers must be 0 or more, got %d", *batchWorkers)
	case *drainTimeout <= 0:
		return fmt.Errorf("--drain-timeout must be positive, got %v", *drainTimeout)
	case given > 1:
		return errors.New("give one of --node-credential, --node-enrollment-key or --cluster-token, not several (a node with the cluster token holds every role's power)")
	case given == 0:
		return errors.New(`--node-credential is required: derive it with "ludus ctl node credential ID" (or give --node-enrollment-key from "ludus ctl node enrollment-key" when node ids are not known in advance; --cluster-token is all-powerful)`)
	case *token != "":
		logger.Warn("this sim node holds the cluster token, which can mint match credentials and credit any account: give it --node-credential instead")
	}
	if *advertise == "" {
		*advertise = "http://" + *listen
	}
	if *id == "" {
		if n, ok := clustercred.ParseNode(*nodeCred); ok {
			*id = n
		} else {
			host, _ := os.Hostname()
			*id = strings.NewReplacer(".", "-", ":", "-").Replace(host + "-" + (*listen)[strings.LastIndexByte(*listen, ':')+1:])
		}
	}
	if *enrollment != "" {
		cred, err := clustercred.NodeFromEnrollment(*enrollment, *id)
		if err != nil {
			return fmt.Errorf("--node-enrollment-key: %w", err)
		}
		*nodeCred = cred
	}
	moduleCred := *nodeCred
	if moduleCred == "" {
		moduleCred = *token
	}
	cli, err := ef.client()
	if err != nil {
		return err
	}
	defer cli.Close()
	eng, err := engine.New(ctx, engine.Config{CacheDir: *cache})
	if err != nil {
		return err
	}
	defer eng.Close(context.Background())
	h2c := &http.Client{Transport: gateway.H2CTransport()}
	var reg *prometheus.Registry // nil: the node's own, served on its NodeService port
	if *metricsAddr != "" {
		reg = gateway.NewRegistry()
	}
	cores := runtime.GOMAXPROCS(0)
	n, err := simnode.New(simnode.Config{
		ID: *id, Region: *region, Addr: *advertise, Capacity: *capacity, Etcd: cli, LeaseTTL: *ttl, Workers: cores,
		Engine: eng, Modules: simnode.NewModuleStore(h2c, *backendURL, moduleCred), ClusterToken: *token, NodeCredential: *nodeCred,
		Results: simnode.NewBackendReporter(h2c, *backendURL),
		Logger:  logger.With("role", "simnode"),
		Metrics: reg,
	})
	if err != nil {
		return err
	}
	n.SetUsageSink(backend.NewUsageReporter(h2c, *backendURL, moduleCred, *id, logger)) // quotas and usage
	if err := n.Start(ctx); err != nil {
		return err
	}
	// A drained node exits by itself: that is how a rolling upgrade proceeds.
	// With --drain-on-term a signal drains it first: the node keeps serving
	// (streams follow their games to the new owners) until it is empty or
	// the timeout passes.
	stopping := ctx
	ctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	go func() {
		select {
		case <-n.Drained():
			logger.Info("drained: exiting")
		case <-stopping.Done():
			if *drainOnTerm {
				logger.Info("stopping: handing every game to other nodes first", "timeout", *drainTimeout)
				dctx, cancel := context.WithTimeout(context.Background(), *drainTimeout)
				if err := n.Drain(dctx); err != nil {
					logger.Warn("the drain did not finish; the games left end as failed (node shutting down)", "err", err)
				} else {
					logger.Info("drained: exiting")
				}
				cancel()
			}
		case <-ctx.Done():
		}
		stop()
	}()
	// Batch games: leased from etcd like any worker's, their modules and
	// results through the backend's BatchWorkerService with this node's
	// credential. No reaper here (it records runs in the backend's store).
	var worker *batch.Worker
	if *batchWorkers > 0 {
		// Go has no goroutine priorities: a P that a batch game holds is one
		// the live matches cannot have. The batch games get Ps of their own;
		// the live matches keep one per core (and the node as many tick
		// slots), the kernel shares the cores, and batch games pause while
		// a live tick starts late. (This stops Go's own GOMAXPROCS updates
		// from the container's CPU limit.)
		runtime.GOMAXPROCS(cores + *batchWorkers)
		// Stopping gives its games back to the queue at once, before any
		// drain: other nodes play them.
		wctx, wstop := context.WithCancel(stopping)
		defer wstop()
		context.AfterFunc(ctx, wstop)
		worker, err = batch.StartWorker(wctx, batch.WorkerConfig{ID: *id, Etcd: cli, Backend: batch.NewRemoteBackend(h2c, *backendURL, moduleCred),
			Engine: eng, Concurrency: *batchWorkers, LiveLate: n.LiveLateness(0, 0).Late, NoReaper: true, Logger: logger.With("role", "batch")})
		if err != nil {
			return errors.Join(fmt.Errorf("batch worker: %w", err), n.Close(context.Background()))
		}
		// On the way out its games in flight go back to the queue (released,
		// or at worst when its etcd lease expires).
		defer func() { wstop(); <-worker.Done() }()
	}
	h := n.Handler()
	if reg != nil {
		h = withoutMetrics(h)
		om := http.NewServeMux()
		om.Handle("GET /metrics", gateway.MetricsHandler(reg))
		stopOperator, err := serveOperator(ctx, *metricsAddr, om, logger)
		if err != nil {
			return errors.Join(err, n.Close(context.Background()))
		}
		defer stopOperator()
	}
	err = serveUntilDone(ctx, *listen, h, bodyTimeout(), logger)
	cerr := n.Close(context.Background())
	return errors.Join(err, cerr)
}

// withoutMetrics hides the /metrics that simnode.Node.Handler serves: with
// --metrics-addr the node's metrics are served on the operator listener only.
func withoutMetrics(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}
