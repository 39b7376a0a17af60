package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
