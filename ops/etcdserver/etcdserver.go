// Package etcdserver runs etcd in process (go.etcd.io/etcd/server/v3/embed):
// one member, alone (`ludus dev`, tests) or of a cluster (`ludus etcd`
// --initial-cluster), or a whole cluster (StartCluster) for tests that take
// etcd's leader down. It binds loopback only. Production runs an external etcd cluster and every role takes its
// endpoints with --etcd.
package etcdserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Config configures an embedded etcd.
type Config struct {
	// Dir holds the data; required.
	Dir string
	// NoFsync trades durability for speed; tests only.
	NoFsync bool
	// ClientPort and PeerPort are loopback ports; 0 picks free ones.
	ClientPort, PeerPort int
	// Name and InitialCluster make the member part of a multi-member cluster
	// (e.g. "a=http://127.0.0.1:2380,b=http://127.0.0.1:2382"); empty for one member.
	Name, InitialCluster string
	// ElectionTimeout and HeartbeatInterval tune failure detection; zero keeps
	// etcd's defaults (1000 ms and 100 ms).
	ElectionTimeout, HeartbeatInterval time.Duration
	// CertFile and KeyFile, if set, make the member serve clients over TLS (https).
	CertFile, KeyFile string
	// CompactionRetention is how long etcd keeps the revisions a key's
	// later writes or deletion replaced; 0 means DefaultCompactionRetention.
	CompactionRetention time.Duration
}

// DefaultCompactionRetention: etcd keeps every replaced revision, in its
// index (memory) and in its database file, until a compaction, and
// matchmaking replaces a lot of them: each ticket creates and deletes a few
// keys. `ludus bench matchmaking` grew the database by about 1.4 KB per
// ticket, so at 3,000 tickets/s an hour's retention would fill the 2 GiB
// default quota (etcd then refuses every write) within ten minutes, and
// every operation slows as the index grows. Ludus reads no old revisions;
// its watches need them only to resume after a broken stream, seconds
// later, and read again if they are gone. A minute keeps the database to
// about two minutes of writes (docs/OPERATIONS.md).
const DefaultCompactionRetention = time.Minute

// Server is a running embedded etcd.
type Server struct {
	e        *embed.Etcd
	Endpoint string // client URL, e.g. http://127.0.0.1:2379
	cfg      Config // as started, ports included (Restart)
	stop     sync.Once
}

// Start starts etcd and waits until it serves.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	// A port picked free (port 0 asked) can be taken by another process
	// before etcd binds it: try again with new ones. etcd binds its
	// listeners before it writes anything to its directory.
	for attempt := 1; ; attempt++ {
		s, err := start(ctx, cfg)
		if err == nil || attempt == 5 || !errors.Is(err, syscall.EADDRINUSE) || (cfg.ClientPort != 0 && cfg.PeerPort != 0) {
			return s, err
		}
	}
}

func start(ctx context.Context, cfg Config) (*Server, error) {
	cport, err := port(cfg.ClientPort)
	if err != nil {
		return nil, err
	}
	pport, err := port(cfg.PeerPort)
	if err != nil {
		return nil, err
	}
	cfg.ClientPort, cfg.PeerPort = cport, pport
	ec := embed.NewConfig()
	ec.Name = "ludus-dev"
	if cfg.Name != "" {
		ec.Name = cfg.Name
	}
	if cfg.ElectionTimeout > 0 {
		ec.ElectionMs = uint(cfg.ElectionTimeout / time.Millisecond)
	}
	if cfg.HeartbeatInterval > 0 {
		ec.TickMs = uint(cfg.HeartbeatInterval / time.Millisecond)
	}
	ec.Dir = cfg.Dir
	ec.LogLevel = "error"
	// etcd logs through zap; Ludus logs through slog. Keep etcd quiet: its
	// shutdown noise is not news, and real failures surface as client errors.
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	ec.UnsafeNoFsync = cfg.NoFsync
	scheme := "http"
	if cfg.CertFile != "" {
		scheme = "https"
		ec.ClientTLSInfo = transport.TLSInfo{CertFile: cfg.CertFile, KeyFile: cfg.KeyFile}
	}
	cu, _ := url.Parse(fmt.Sprintf("%s://127.0.0.1:%d", scheme, cport))
	pu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", pport))
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	if cfg.InitialCluster != "" {
		ec.InitialCluster = cfg.InitialCluster
		ec.InitialClusterToken = "ludus"
	}
	// Deleted keys (finished games' logs, settled tickets) and replaced
	// values stay in the store until compacted (DefaultCompactionRetention).
	retention := cfg.CompactionRetention
	if retention <= 0 {
		retention = DefaultCompactionRetention
	}
	ec.AutoCompactionMode = embed.CompactorModePeriodic
	ec.AutoCompactionRetention = retention.String()
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("etcdserver: start: %w", err)
	}
	if cfg.InitialCluster != "" {
		// A member of a cluster is ready only once a quorum is up; don't wait here.
		return &Server{e: e, Endpoint: cu.String(), cfg: cfg}, nil
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, fmt.Errorf("etcdserver: not ready after 30 s")
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
	return &Server{e: e, Endpoint: cu.String(), cfg: cfg}, nil
}

// Client returns a new client of the server.
func (s *Server) Client() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{s.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

// Close stops etcd (a leader hands its leadership to another member
// first); later calls, and Close after Kill, do nothing.
func (s *Server) Close() {
	s.stop.Do(s.e.Close)
}

func port(p int) (int, error) {
	if p != 0 {
		return p, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
