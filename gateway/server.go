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
//
// A client that vanishes without closing its connection (a dropped network,
// a phone put to sleep) sends no FIN or RST, and TCP alone would keep its
// streams open for many minutes: its seat, its matchmaking ticket, a stream
// slot of its account. So the server pings an HTTP/2 connection it has
// heard nothing from for ClientPingAfter and closes it when no answer comes
// within ClientPingTimeout, and closes any connection whose sent data stays
// unacknowledged for ClientAckTimeout (TCP_USER_TIMEOUT, where the system
// has it; HTTP/1.1 streams have no pings).
func NewServer(h http.Handler, tlsConfig *tls.Config) *http.Server {
	return newServer(h, tlsConfig, defaultLiveness)
}

const (
	// ClientPingAfter is how long an HTTP/2 connection may be silent before
	// the server pings it.
	ClientPingAfter = 15 * time.Second
	// ClientPingTimeout is how long the server waits for the ping's answer
	// before it closes the connection.
	ClientPingTimeout = 15 * time.Second
	// ClientAckTimeout is how long data sent on a connection may stay
	// unacknowledged (or unwritable) before the connection is closed.
	ClientAckTimeout = 30 * time.Second
)

// liveness is when the server gives up on a silent client.
type liveness struct{ pingAfter, pingTimeout, ackTimeout time.Duration }

var defaultLiveness = liveness{ClientPingAfter, ClientPingTimeout, ClientAckTimeout}

func newServer(h http.Handler, tlsConfig *tls.Config, l liveness) *http.Server {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	if tlsConfig != nil {
		p.SetHTTP2(true)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	return &http.Server{
		Handler: h, Protocols: p, TLSConfig: tlsConfig, ReadHeaderTimeout: ReadHeaderTimeout,
		HTTP2: &http.HTTP2Config{SendPingTimeout: l.pingAfter, PingTimeout: l.pingTimeout, WriteByteTimeout: l.ackTimeout},
		ConnState: func(c net.Conn, s http.ConnState) {
			if s == http.StateNew {
				setAckTimeout(c, l.ackTimeout)
			}
		},
	}
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
	if logger != nil {
		// The server's own complaints (a failed TLS handshake, a client
		// that answered no ping) go where the role's logs go.
		srv.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	}
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
