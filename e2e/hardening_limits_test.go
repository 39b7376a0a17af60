package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/gateway"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/ops/devstack"
)

// countingBackend is a pass-through in front of the stack's backend that
// counts the calls reaching it, by path prefix.
type countingBackend struct {
	url   string
	mu    sync.Mutex
	calls map[string]int
}

func startCountingBackend(t *testing.T) *countingBackend {
	t.Helper()
	target, _ := url.Parse(stack.BackendURL)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = gateway.H2CTransport()
	rp.ErrorLog = log.New(io.Discard, "", 0) // calls the gateway cuts off
	cb := &countingBackend{calls: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cb.url = "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gateway.Serve(ctx, ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			svc, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
			cb.mu.Lock()
			cb.calls[svc]++
			cb.mu.Unlock()
			rp.ServeHTTP(w, r)
		}), nil, nil)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return cb
}

func (cb *countingBackend) count(svc string) int {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	return cb.calls[svc]
}

// TestHardeningPassThroughLimits: the gateway passes bodies to the backend
// by procedure — AuthService 16 KiB, the other pass-through services 256 KiB,
// UploadModule 33 MiB — and refuses a larger one itself, quickly, with
// ResourceExhausted in the caller's protocol, whether the body announces its
// length or streams without one: the backend never sees it.
func TestHardeningPassThroughLimits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cb := startCountingBackend(t)
	tg := startGateway(t, false, func(c *gateway.Config) { c.BackendURL = cb.url })
	authSvc, adminSvc := ludusv1connect.AuthServiceName, ludusv1connect.AdminServiceName
	notPassed := func(t *testing.T, svc string, before int) {
		t.Helper()
		if n := cb.count(svc); n != before {
			t.Fatalf("%d oversized %s call(s) reached the backend", n-before, svc)
		}
	}
	h1, _ := transports[0].client(tg)
	h2, _ := transports[1].client(tg)
	big := strings.Repeat("x", 1<<20)
	guest := &ludusv1.GuestLoginRequest{Tenant: devstack.DemoTenant, DeviceId: "dev-0123456789abcdef", DisplayName: big}

	t.Run("connect-json-content-length", func(t *testing.T) {
		body := []byte(`{"tenant":"demo","deviceId":"dev-0123456789abcdef","displayName":"` + big + `"}`)
		defer notPassed(t, authSvc, cb.count(authSvc))
		start := time.Now()
		req, _ := http.NewRequestWithContext(ctx, "POST", tg.url+ludusv1connect.AuthServiceGuestLoginProcedure, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := h1.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(b), "resource_exhausted") || took > 2*time.Second {
			t.Fatalf("1 MiB GuestLogin (Connect JSON): %s %.300s after %v", resp.Status, b, took)
		}
		t.Logf("refused in %v: %s", took.Round(time.Millisecond), b)
	})
	for _, p := range []struct {
		name string
		hc   *http.Client
		opts []connect.ClientOption
	}{
		{"grpc-h2c", h2, []connect.ClientOption{connect.WithGRPC()}},
		{"grpcweb-http1", h1, []connect.ClientOption{connect.WithGRPCWeb()}},
		{"connect-h2c", h2, nil},
	} {
		t.Run(p.name, func(t *testing.T) {
			defer notPassed(t, authSvc, cb.count(authSvc))
			start := time.Now()
			_, err := ludusv1connect.NewAuthServiceClient(p.hc, tg.url, p.opts...).GuestLogin(ctx, connect.NewRequest(guest))
			if connect.CodeOf(err) != connect.CodeResourceExhausted || time.Since(start) > 2*time.Second {
				t.Fatalf("1 MiB GuestLogin: %v after %v", err, time.Since(start))
			}
		})
	}
	t.Run("admin-256KiB", func(t *testing.T) {
		defer notPassed(t, adminSvc, cb.count(adminSvc))
		admin := ludusv1connect.NewAdminServiceClient(h2, tg.url, connect.WithGRPC())
		_, err := admin.CreateTenant(ctx, connect.NewRequest(&ludusv1.CreateTenantRequest{Slug: "x", Name: strings.Repeat("n", 300<<10)}))
		wantCode(t, err, connect.CodeResourceExhausted)
	})
	// A body without a length is cut while it streams (the backend has seen
	// the call start; its own limit, 256 KiB for AdminService, is not reached).
	small := startGateway(t, false, func(c *gateway.Config) {
		c.BackendURL = cb.url
		c.Limits.MaxAdminMessageBytes = 1 << 10
	})
	for _, tc := range []struct {
		name, ctype string
		hc          *http.Client
		prefix      []byte
		want        string
	}{
		{"streamed-grpc-h2c", "application/grpc", h2, []byte{0, 0, 1, 0x90, 0}, "grpc-status 8"},
		{"streamed-connect-http1-chunked", "application/proto", h1, nil, "429"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr, pw := io.Pipe()
			go func() {
				_, _ = pw.Write(tc.prefix)
				for range 100 {
					if _, err := pw.Write(make([]byte, 1<<10)); err != nil {
						return
					}
				}
				pw.Close()
			}()
			req, _ := http.NewRequestWithContext(ctx, "POST", small.url+ludusv1connect.AdminServiceListTenantsProcedure, pr)
			req.Header.Set("Content-Type", tc.ctype)
			req.Header.Set("Te", "trailers")
			start := time.Now()
			resp, err := tc.hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			pr.CloseWithError(io.ErrClosedPipe)
			got := fmt.Sprint(resp.StatusCode)
			if st := resp.Header.Get("Grpc-Status") + resp.Trailer.Get("Grpc-Status"); st != "" {
				got = "grpc-status " + st
			}
			if got != tc.want || time.Since(start) > 2*time.Second {
				t.Fatalf("100 KiB streamed to a 1 KiB limit: %s %q (%s) after %v, want %s", got, b,
					resp.Header.Get("Grpc-Message")+resp.Trailer.Get("Grpc-Message"), time.Since(start), tc.want)
			}
			t.Logf("%s %s%s", got, b, resp.Trailer.Get("Grpc-Message"))
		})
	}
	t.Run("upload-passes", func(t *testing.T) {
		// A 1 MiB module reaches the backend, which refuses the caller (no key).
		admin := ludusv1connect.NewAdminServiceClient(h2, tg.url, connect.WithGRPC())
		_, err := admin.UploadModule(ctx, connect.NewRequest(&ludusv1.UploadModuleRequest{Name: "big", Wasm: []byte(big)}))
		wantCode(t, err, connect.CodeUnauthenticated)
	})
	t.Run("small-login-passes", func(t *testing.T) {
		before := cb.count(authSvc)
		loginAt(t, h2, tg.url, connect.WithGRPC())
		loginAt(t, h1, tg.url)
		if cb.count(authSvc) != before+2 {
			t.Fatalf("%d logins reached the backend, want 2", cb.count(authSvc)-before)
		}
	})
}
