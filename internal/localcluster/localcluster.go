// Package localcluster runs a Ludus cluster as separate processes of the real
// `ludus` binary on loopback — etcd member(s), the backend, a gateway and sim
// nodes — so that tests and `ludus bench failover` can kill -9, SIGSTOP and
// restart any of them. Everything binds 127.0.0.1 and dies with Close.
package localcluster

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/auth/clustercred"
	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/internal/bearer"
)

// Config describes the cluster to start.
type Config struct {
	// Binary is the path of the ludus binary.
	Binary string
	// Dir holds every process's data.
	Dir string
	// Nodes is the number of sim nodes (default 3).
	Nodes int
	// EtcdMembers is 1 or 3 (default 1).
	EtcdMembers int
	// LeaseTTL of the sim nodes (default 2 s).
	LeaseTTL time.Duration
	// Logs receives every process's stderr (default: discarded).
	Logs io.Writer
	// Module is uploaded as "arena" to the tenant "demo"; required.
	Module []byte
	// WazeroCache, if set, is shared by the sim nodes as their compilation cache.
	WazeroCache string
}

// Proc is one child process.
type Proc struct {
	Name string
	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Cluster is a running local cluster.
type Cluster struct {
	cfg           Config
	EtcdEndpoints []string
	BackendURL    string
	GatewayURL    string
	OperatorKey   string
	ClusterToken  string
	TenantID      string
	// AdminKey is the demo tenant's admin API key.
	AdminKey string
	// Etcd is the cluster state (its Raw client for tests that inspect etcd).
	Etcd *clusterstate.Client
	// NodeAddrs maps node ids to their NodeService URLs.
	NodeAddrs map[string]string

	mu    sync.Mutex
	procs map[string]*Proc
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func secret() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Start starts every process and waits until the cluster serves, with the
// "demo" tenant holding the module as "arena".
func Start(ctx context.Context, cfg Config) (c *Cluster, err error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.EtcdMembers == 0 {
		cfg.EtcdMembers = 1
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 2 * time.Second
	}
	if cfg.Logs == nil {
		cfg.Logs = io.Discard
	}
	c = &Cluster{cfg: cfg, procs: map[string]*Proc{}, NodeAddrs: map[string]string{},
		OperatorKey: "lds_op_" + secret(), ClusterToken: secret()}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()

	// etcd.
	var members []string
	type member struct{ name, client, peer string }
	var ms []member
	for i := 0; i < cfg.EtcdMembers; i++ {
		cp, err := freePort()
		if err != nil {
			return nil, err
		}
		pp, err := freePort()
		if err != nil {
			return nil, err
		}
		m := member{fmt.Sprintf("etcd-%d", i), fmt.Sprint(cp), fmt.Sprint(pp)}
		ms = append(ms, m)
		members = append(members, fmt.Sprintf("%s=http://127.0.0.1:%s", m.name, m.peer))
		c.EtcdEndpoints = append(c.EtcdEndpoints, "http://127.0.0.1:"+m.client)
	}
	for _, m := range ms {
		args := []string{"etcd", "--data", filepath.Join(cfg.Dir, m.name), "--client-port", m.client, "--peer-port", m.peer, "--unsafe-no-fsync"}
		if cfg.EtcdMembers > 1 {
			args = append(args, "--name", m.name, "--initial-cluster", strings.Join(members, ","))
		}
		if err := c.spawn(m.name, args); err != nil {
			return nil, err
		}
	}
	c.Etcd, err = clusterstate.Dial(clusterstate.DialConfig{Endpoints: c.EtcdEndpoints})
	if err != nil {
		return nil, err
	}
	if err := waitFor(ctx, "etcd", func(ctx context.Context) error {
		_, err := c.Etcd.Revision(ctx)
		return err
	}); err != nil {
		return nil, err
	}
	etcdFlag := strings.Join(c.EtcdEndpoints, ",")

	// Backend.
	bp, err := freePort()
	if err != nil {
		return nil, err
	}
	c.BackendURL = fmt.Sprintf("http://127.0.0.1:%d", bp)
	if err := c.spawn("backend", []string{"backend", "--etcd", etcdFlag, "--listen", fmt.Sprintf("127.0.0.1:%d", bp),
		"--data", filepath.Join(cfg.Dir, "backend"), "--cluster-token", c.ClusterToken, "--operator-key", c.OperatorKey}); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, "backend", httpOK(c.BackendURL+"/.well-known/jwks.json")); err != nil {
		return nil, err
	}
	if err := c.seed(ctx); err != nil {
		return nil, err
	}

	// Sim nodes.
	for i := 1; i <= cfg.Nodes; i++ {
		np, err := freePort()
		if err != nil {
			return nil, err
		}
		id := fmt.Sprintf("node-%d", i)
		c.NodeAddrs[id] = fmt.Sprintf("http://127.0.0.1:%d", np)
		cache := cfg.WazeroCache
		if cache == "" {
			cache = filepath.Join(cfg.Dir, "wazero-"+id)
		}
		// Each node runs with its own credential, never the cluster token.
		nodeCred, err := clustercred.Node(c.ClusterToken, id)
		if err != nil {
			return nil, err
		}
		if err := c.spawn(id, []string{"simnode", "--etcd", etcdFlag, "--listen", fmt.Sprintf("127.0.0.1:%d", np),
			"--id", id, "--backend", c.BackendURL, "--node-credential", nodeCred,
			"--lease-ttl", cfg.LeaseTTL.String(), "--cache", cache}); err != nil {
			return nil, err
		}
	}
	if err := waitFor(ctx, "sim nodes", func(ctx context.Context) error {
		nodes, err := c.Etcd.View().Nodes(ctx)
		if err != nil {
			return err
		}
		if len(nodes) < cfg.Nodes {
			return fmt.Errorf("%d of %d registered", len(nodes), cfg.Nodes)
		}
		return nil
	}); err != nil {
		return nil, err
	}

	// Gateway.
	gp, err := freePort()
	if err != nil {
		return nil, err
	}
	c.GatewayURL = fmt.Sprintf("http://127.0.0.1:%d", gp)
	if err := c.spawn("gateway", []string{"gateway", "--etcd", etcdFlag, "--listen", fmt.Sprintf("127.0.0.1:%d", gp),
		"--backend", c.BackendURL, "--cluster-token", c.ClusterToken}); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, "gateway", httpOK(c.GatewayURL+"/.well-known/jwks.json")); err != nil {
		return nil, err
	}
	return c, nil
}

// seed creates the demo tenant and uploads the module.
func (c *Cluster) seed(ctx context.Context) error {
	op := ludusv1connect.NewAdminServiceClient(http.DefaultClient, c.BackendURL, connect.WithInterceptors(bearer.Token(c.OperatorKey)))
	t, err := op.CreateTenant(ctx, connect.NewRequest(&ludusv1.CreateTenantRequest{Slug: "demo", Name: "Demo"}))
	if err != nil {
		return fmt.Errorf("seed tenant: %w", err)
	}
	c.TenantID = t.Msg.Tenant.Id
	c.AdminKey = t.Msg.AdminKey
	admin := ludusv1connect.NewAdminServiceClient(http.DefaultClient, c.BackendURL,
		connect.WithInterceptors(bearer.Token(t.Msg.AdminKey)), connect.WithSendMaxBytes(64<<20))
	if _, err := admin.UploadModule(ctx, connect.NewRequest(&ludusv1.UploadModuleRequest{Name: "arena", Wasm: c.cfg.Module})); err != nil {
		return fmt.Errorf("seed module: %w", err)
	}
	return nil
}

func (c *Cluster) spawn(name string, args []string) error {
	p := &Proc{Name: name, args: args}
	c.mu.Lock()
	c.procs[name] = p
	c.mu.Unlock()
	return p.start(c.cfg)
}

func (p *Proc) start(cfg Config) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command(cfg.Binary, p.args...)
	cmd.Stdout = io.Discard
	cmd.Stderr = prefixWriter{w: cfg.Logs, prefix: p.Name + " "}
	// Own process group: a test's kill reaches exactly this process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	p.cmd = cmd
	p.done = make(chan struct{})
	done := p.done
	go func() { _ = cmd.Wait(); close(done) }()
	return nil
}

// Proc returns a process by name ("etcd-0", "backend", "gateway", "node-1", ...).
func (c *Cluster) Proc(name string) *Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[name]
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return errors.New("not running")
	}
	return p.cmd.Process.Signal(sig)
}

// Kill kills the process with SIGKILL and waits for it to be gone.
func (p *Proc) Kill() error {
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	<-done
	return nil
}

// Exited is closed when the process has exited.
func (p *Proc) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Restart starts a killed process again with the same arguments.
func (c *Cluster) Restart(name string) error {
	p := c.Proc(name)
	if p == nil {
		return fmt.Errorf("no process %s", name)
	}
	select {
	case <-p.Exited():
	default:
		return fmt.Errorf("%s is still running", name)
	}
	return p.start(c.cfg)
}

// Close kills every process.
func (c *Cluster) Close() {
	c.mu.Lock()
	procs := make([]*Proc, 0, len(c.procs))
	for _, p := range c.procs {
		procs = append(procs, p)
	}
	c.mu.Unlock()
	for _, p := range procs {
		_ = p.Signal(syscall.SIGCONT)
		_ = p.Kill()
	}
	if c.Etcd != nil {
		c.Etcd.Close()
	}
}

func waitFor(ctx context.Context, what string, check func(context.Context) error) error {
	deadline := time.Now().Add(90 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = check(cctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready: %v", what, last)
}

func httpOK(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}
}

type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	if p.w == io.Discard {
		return len(b), nil
	}
	lines := strings.SplitAfter(string(b), "\n")
	for _, l := range lines {
		if l != "" {
			io.WriteString(p.w, p.prefix+l)
		}
	}
	return len(b), nil
}

// CPUTime is the CPU time (user + system) the process has used so far, read
// from /proc (Linux; false elsewhere or once it has exited).
func (p *Proc) CPUTime() (time.Duration, bool) {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return 0, false
	}
	return procCPUTime(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
}

// procCPUTime reads utime + stime from a /proc/PID/stat file. The fields
// after the command name (which may hold spaces, inside parentheses) are
// space-separated; utime and stime are the 14th and 15th fields, in clock
// ticks of 1/100 s (USER_HZ, 100 on Linux).
func procCPUTime(path string) (time.Duration, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	return parseProcStat(string(b))
}

func parseProcStat(s string) (time.Duration, bool) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, false
	}
	var ut, st int64
	if _, err := fmt.Sscan(f[11], &ut); err != nil {
		return 0, false
	}
	if _, err := fmt.Sscan(f[12], &st); err != nil {
		return 0, false
	}
	return time.Duration(ut+st) * (time.Second / 100), true
}

// Procs returns the names of the cluster's processes, sorted.
func (c *Cluster) Procs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(c.procs))
	for n := range c.procs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
