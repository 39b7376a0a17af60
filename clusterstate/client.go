package clusterstate

import (
	"context"
	"crypto/tls"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Client is Ludus's handle on etcd. Its methods are the only way our packages
// read or write cluster state; it is safe for concurrent use.
type Client struct {
	cli *clientv3.Client

	// Made on first use, for the life of cli: the committer of the
	// matchmaking writes (tickets.go, "Group commit") and the one watch of
	// every party's members (PartyFollower).
	commitOnce, hubOnce sync.Once
	commits             *groupCommitter
	hub                 *partyHub
}

// New wraps an etcd client (from ops/etcdserver, or one built by cmd/). Closing
// the Client closes it.
func New(cli *clientv3.Client) *Client { return &Client{cli: cli} }

// DialConfig says how to reach an etcd cluster.
type DialConfig struct {
	// Endpoints are the members' client URLs, e.g. http://127.0.0.1:2379.
	Endpoints []string
	// TLS, if set, is used for every endpoint (https:// URLs).
	TLS *tls.Config
	// Username and Password, if set, authenticate to etcd.
	Username, Password string
	// DialTimeout bounds the first connection. Default 5 s.
	DialTimeout time.Duration
}

// Dial connects to etcd. The etcd client logs nothing: its errors surface
// through the calls, and slog is our log.
func Dial(cfg DialConfig) (*Client, error) {
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		TLS:         cfg.TLS,
		Username:    cfg.Username,
		Password:    cfg.Password,
		DialTimeout: cfg.DialTimeout,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, err
	}
	return New(cli), nil
}

// Close closes the connection to etcd; watches (Directory, WatchOwners) end.
func (c *Client) Close() error { return c.cli.Close() }

// Raw returns the etcd client underneath, for tests and tools that inspect
// etcd itself (member status, raw key counts). Ludus's packages use the typed
// methods instead: the import guard (internal/deps) keeps etcd requests here.
func (c *Client) Raw() *clientv3.Client { return c.cli }

// Revision returns etcd's current revision (it advances by one per committed
// write transaction). It doubles as a health check.
func (c *Client) Revision(ctx context.Context) (int64, error) {
	resp, err := c.cli.Get(ctx, Prefix+"none", clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}
