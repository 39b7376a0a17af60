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

// Serve serves h on ln (with TLS if tlsConfig is set) until ctx is done,
// then stops as DefaultShutdown says: ServeUntil.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, tlsConfig *tls.Config, logger *slog.Logger) error {
	return ServeUntil(ctx, ln, h, tlsConfig, logger, DefaultShutdown)
}

// Shutdown is how a server stops once its context is done.
type Shutdown struct {
	// Unready, if set, is called first: the server reports NOT_SERVING
	// (Gateway.SetServing), so that load balancers take it out of rotation.
	Unready func()
	// Delay is how long the server goes on serving after that, new
	// connections included, while load balancers notice: a listener closed
	// at once refuses the connections they still send it.
	Delay time.Duration
	// Grace is how long requests in flight then get to finish, with the
	// listener closed and HTTP/2 clients told to go elsewhere (GOAWAY).
	// Streams still open after it (a game's frames, a matchmaking search)
	// are cut: their clients open them again through another server.
	Grace time.Duration
}

// DefaultShutdown: no delay, 5 s for requests in flight.
var DefaultShutdown = Shutdown{Grace: 5 * time.Second}

// ServeUntil serves h on ln (with TLS if tlsConfig is set) until ctx is done,
// then stops as sd says. Streams cut at the end of sd.Grace are part of
// stopping, not an error: it returns nil then.
func ServeUntil(ctx context.Context, ln net.Listener, h http.Handler, tlsConfig *tls.Config, logger *slog.Logger, sd Shutdown) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	srv := NewServer(h, tlsConfig)
	// The server's own complaints (a failed TLS handshake, a client that
	// answered no ping) go where the role's logs go.
	srv.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	errc := make(chan error, 1)
	go func() {
		if tlsConfig != nil {
			errc <- srv.ServeTLS(ln, "", "")
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	logger.Info("listening", "addr", ln.Addr().String(), "tls", tlsConfig != nil)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	if sd.Unready != nil {
		sd.Unready()
	}
	if sd.Delay > 0 {
		logger.Info("stopping: not ready, still serving while load balancers notice", "delay", sd.Delay)
		select {
		case err := <-errc:
			return err
		case <-time.After(sd.Delay):
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), sd.Grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// Streams are still open after the grace period: cut them.
		logger.Info("stopping: closing the connections still open", "grace", sd.Grace)
		return srv.Close()
	}
	return nil
}
