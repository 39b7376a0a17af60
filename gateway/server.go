package gateway

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// NewServer returns the gateway's http.Server. Without TLS it speaks HTTP/1.1
// and HTTP/2 without TLS (h2c, which gRPC and Play need); with tlsConfig,
// HTTP/1.1 and HTTP/2 over TLS, chosen by ALPN ("h2", "http/1.1"). Headers
// must arrive within ReadHeaderTimeout; bodies have their own deadline
// (GuardBodies, in Gateway.Handler).
func NewServer(h http.Handler, tlsConfig *tls.Config) *http.Server {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	if tlsConfig != nil {
		p.SetHTTP2(true)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	return &http.Server{Handler: h, Protocols: p, TLSConfig: tlsConfig, ReadHeaderTimeout: ReadHeaderTimeout}
}

// ReadHeaderTimeout is how long every Ludus listener waits for a request's
// headers.
const ReadHeaderTimeout = 10 * time.Second

// LoadTLS reads a PEM certificate (chain) and key and returns a server TLS
// configuration offering HTTP/2 and HTTP/1.1 by ALPN.
func LoadTLS(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load TLS certificate: %w", err)
	}
	return TLSConfig(cert), nil
}

// TLSConfig returns a server TLS configuration for cert offering HTTP/2 and
// HTTP/1.1 by ALPN.
func TLSConfig(cert tls.Certificate) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"},
	}
}

// Serve serves h on ln (with TLS if tlsConfig is set) until ctx is done, then
// shuts down gracefully within 5 s.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, tlsConfig *tls.Config, logger *slog.Logger) error {
	srv := NewServer(h, tlsConfig)
	errc := make(chan error, 1)
	go func() {
		if tlsConfig != nil {
			errc <- srv.ServeTLS(ln, "", "")
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	if logger != nil {
		logger.Info("listening", "addr", ln.Addr().String(), "tls", tlsConfig != nil)
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}
