package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"ludus.dev/ludus/auth/clustercred"
	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/batch"
	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/internal/testenv"
	"ludus.dev/ludus/ops/etcdserver"
)

// selfSigned writes a CA-less self-signed certificate for 127.0.0.1.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ludus-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile
}

// TestEtcdTLSFlags: every role reaches an etcd that serves TLS with
// --etcd-cacert, and refuses to talk to it without trusting its certificate.
func TestEtcdTLSFlags(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	ctx := context.Background()
	es, err := etcdserver.Start(ctx, etcdserver.Config{Dir: filepath.Join(dir, "etcd"), NoFsync: true, CertFile: cert, KeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	if !strings.HasPrefix(es.Endpoint, "https://") {
		t.Fatalf("endpoint %s is not https", es.Endpoint)
	}
	connect := func(args ...string) error {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		ef := addEtcdFlags(fs)
		if err := fs.Parse(append([]string{"--etcd", es.Endpoint}, args...)); err != nil {
			return err
		}
		cli, err := ef.client()
		if err != nil {
			return err
		}
		defer cli.Close()
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err = cli.Raw().Put(cctx, "/ludus/tls-check", "ok")
		return err
	}
	if err := connect("--etcd-cacert", cert); err != nil {
		t.Fatalf("with --etcd-cacert: %v", err)
	}
	if err := connect(); err == nil {
		t.Fatal("connected over TLS without trusting the server's certificate")
	}
	if err := connect("--etcd-cacert", filepath.Join(dir, "missing.pem")); err == nil || !strings.Contains(err.Error(), "--etcd-cacert") {
		t.Fatalf("missing CA file: %v", err)
	}
	if err := connect("--etcd-cacert", cert, "--etcd-cert", cert); err == nil || !strings.Contains(err.Error(), "go together") {
		t.Fatalf("cert without key: %v", err)
	}
}

// TestSimnodeBatchWorkers: `ludus simnode --batch-workers N` plays batch games
// with nothing but its node credential: leased from etcd, its module and
// results through the backend's BatchWorkerService over HTTP/2, every game
// stored once with the node as its worker. A negative count is refused.
func TestSimnodeBatchWorkers(t *testing.T) {
	t.Setenv("LUDUS_CLUSTER_TOKEN", "")
	t.Setenv("LUDUS_NODE_CREDENTIAL", "")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := runSimnode(context.Background(), []string{"--batch-workers", "-1", "--node-credential", "lnd_x_y"}, quiet); err == nil ||
		!strings.Contains(err.Error(), "--batch-workers must be 0 or more") {
		t.Fatalf("--batch-workers -1: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const token = "roles-test-cluster-token"
	c := startRoleCluster(t, ctx, token, "batchnode")
	etcd, srv, eng, tenant := c.etcd, c.backend, c.engine, c.tenant
	// The backend's side: a reaper, which records the runs the node ends.
	rctx, stopReaper := context.WithCancel(ctx)
	reaped := make(chan struct{})
	go func() {
		defer close(reaped)
		batch.RunReaper(rctx, etcd, srv, "", 2*time.Second, batch.ReaperConfig{Every: 100 * time.Millisecond}, quiet)
	}()
	defer func() { stopReaper(); <-reaped }()
	const games = 4
	adm := &batch.Admitter{Etcd: etcd, Backend: srv, Engine: eng}
	run, err := adm.Admit(ctx, tenant, batch.Spec{Module: "arena", Games: games, Budget: time.Hour,
		Maps: []batch.Map{{Config: json.RawMessage(`{"bots":4,"time_limit_s":5}`)}}})
	if err != nil {
		t.Fatal(err)
	}

	cred, err := clustercred.Node(token, "sn-batch")
	if err != nil {
		t.Fatal(err)
	}
	cores := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(cores) // the role gives batch games Ps of their own
	nctx, stopNode := context.WithCancel(ctx)
	nodeDone := make(chan error, 1)
	go func() {
		nodeDone <- runSimnode(nctx, []string{"--etcd", c.etcdEndpoint, "--backend", c.backendURL, "--node-credential", cred,
			"--listen", "127.0.0.1:0", "--cache", testenv.WazeroCacheDir(), "--batch-workers", "2"}, quiet)
	}()
	for {
		r, err := etcd.BatchRun(ctx, tenant, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.State == clusterstate.BatchEnded {
			if r.Reason != clusterstate.BatchComplete || r.Final.Done != games {
				t.Fatalf("run ended %s with %+v", r.Reason, r.Final)
			}
			break
		}
		select {
		case err := <-nodeDone:
			t.Fatalf("the sim node stopped: %v", err)
		case <-ctx.Done():
			t.Fatalf("the run did not end: %+v", r)
		case <-time.After(20 * time.Millisecond):
		}
	}
	results, _, err := srv.BatchResults(ctx, tenant, run.ID, store.BatchResultQuery{Limit: store.MaxBatchResultPage})
	if err != nil || len(results) != games {
		t.Fatalf("%d results, want %d: %v", len(results), games, err)
	}
	for _, r := range results {
		if r.Worker != "sn-batch" || r.Error != "" || r.Ticks == 0 {
			t.Errorf("game %d: worker %q error %q ticks %d", r.Game, r.Worker, r.Error, r.Ticks)
		}
	}
	if got := runtime.GOMAXPROCS(0); got != cores+2 {
		t.Errorf("GOMAXPROCS %d with 2 batch workers on %d cores, want %d", got, cores, cores+2)
	}
	stopNode()
	select {
	case err := <-nodeDone:
		if err != nil {
			t.Fatalf("the sim node stopped with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the sim node did not stop")
	}
}
