package backend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"
)

// Webhook destinations. A webhook URL is chosen by a tenant, and the backend
// POSTs to it from inside the operator's network: unchecked, it would let a
// tenant reach loopback services, cloud metadata endpoints or anything else
// on that network (SSRF), and read answers or timings back through the
// delivery state. So, unless Config.AllowPrivateWebhooks is set:
//
//   - SetWebhook accepts only http(s) URLs without credentials whose host is,
//     or resolves only to, public addresses (isPublicAddr);
//   - every connection a delivery dials is checked again on the address
//     actually dialled (a net.Dialer Control function), so a name that
//     resolves to a public address at SetWebhook and to an internal one later
//     (DNS rebinding) is still refused;
//   - redirects are never followed (a 3xx is a failed attempt), and no
//     HTTP proxy from the environment is used (it would dial for us);
//   - what the tenant sees of a failed attempt is generic: never the dial
//     error, an address or a port (the log has the details).

// errNonPublicAddr is what the dialer answers for a refused address.
var errNonPublicAddr = errors.New("webhook destination is not a public address")

// Errors a tenant sees in a delivery's last_error.
var (
	errDeliveryUnreachable = errors.New("delivery failed: the endpoint could not be reached or did not answer in time")
	errDeliveryNonPublic   = errors.New("delivery failed: the endpoint's address is not a public internet address")
	errDeliveryBadURL      = errors.New("delivery failed: the webhook URL is not valid; set it again")
)

// nonPublicPrefixes are ranges no webhook may reach besides those netip
// classifies (loopback, private, link-local, multicast, unspecified).
var nonPublicPrefixes = func() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",       // "this network"
		"100.64.0.0/10",   // shared address space (carrier-grade NAT)
		"192.0.0.0/24",    // IETF protocol assignments
		"192.0.2.0/24",    // documentation
		"198.18.0.0/15",   // benchmarking
		"198.51.100.0/24", // documentation
		"203.0.113.0/24",  // documentation
		"240.0.0.0/4",     // reserved, and the broadcast address
		"100::/64",        // discard
		"64:ff9b:1::/48",  // local-use NAT64 (RFC 8215): translated inside the network
		"2001::/32",       // Teredo (embeds an obfuscated IPv4 address)
		"2001:db8::/32",   // documentation
		"fec0::/10",       // site-local (deprecated, still routed privately)
	} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

// Prefixes of IPv6 addresses that carry an IPv4 address a relay or
// translator would deliver to: the embedded address is checked too.
var (
	nat64Prefix      = netip.MustParsePrefix("64:ff9b::/96")    // well-known NAT64: v4 in the last 32 bits
	translatedPrefix = netip.MustParsePrefix("::ffff:0:0:0/96") // SIIT IPv4-translated: v4 in the last 32 bits
	sixToFourPrefix  = netip.MustParsePrefix("2002::/16")       // 6to4: v4 in bits 16..47
)

// isPublicAddr reports whether a webhook may connect to ip: not loopback,
// private (RFC 1918, RFC 4193), link-local, unspecified, multicast,
// carrier-grade NAT (100.64/10) or another special range, in any IPv4-mapped,
// IPv4-compatible, NAT64 or 6to4 form.
func isPublicAddr(ip netip.Addr) bool {
	ip = ip.WithZone("")
	if ip.Is4In6() {
		ip = ip.Unmap()
	}
	if !ip.IsValid() || ip.IsUnspecified() || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() ||
		ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() || ip.IsMulticast() {
		return false
	}
	for _, p := range nonPublicPrefixes {
		if p.Contains(ip) {
			return false
		}
	}
	if ip.Is6() {
		b := ip.As16()
		var v4 [4]byte
		switch {
		case nat64Prefix.Contains(ip), translatedPrefix.Contains(ip):
			copy(v4[:], b[12:16])
		case sixToFourPrefix.Contains(ip):
			copy(v4[:], b[2:6])
		case [12]byte(b[:12]) == [12]byte{}: // IPv4-compatible ::a.b.c.d (deprecated)
			copy(v4[:], b[12:16])
		default:
			return true
		}
		return isPublicAddr(netip.AddrFrom4(v4))
	}
	return true
}

// refuseNonPublic is a net.Dialer Control function: it runs on the address
// about to be connected to, after name resolution.
func refuseNonPublic(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil || !isPublicAddr(ap.Addr()) {
		return errNonPublicAddr
	}
	return nil
}

// noRedirects makes a client return a 3xx answer instead of following it.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// newWebhookClient returns the client deliveries use: given (redirects off)
// or built (no proxy, redirects off, and unless allowPrivate every dialled
// address checked).
func newWebhookClient(given *http.Client, allowPrivate bool) *http.Client {
	if given != nil {
		c := *given
		c.CheckRedirect = noRedirects
		return &c
	}
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	if !allowPrivate {
		d.Control = refuseNonPublic
	}
	return &http.Client{
		Timeout:       10 * time.Second,
		CheckRedirect: noRedirects,
		Transport: &http.Transport{
			Proxy:                 nil, // a proxy would dial for us, past the check
			DialContext:           d.DialContext,
			ForceAttemptHTTP2:     true,
			TLSHandshakeTimeout:   5 * time.Second,
			ResponseHeaderTimeout: 10 * time.Second,
			MaxIdleConns:          64,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
		},
	}
}

// webhookLookupTimeout bounds SetWebhook's name resolution.
const webhookLookupTimeout = 5 * time.Second

// checkWebhookURL validates a webhook URL for SetWebhook and returns it
// normalized. Errors are for the tenant (InvalidArgument). A host that does
// not resolve and one that resolves to an internal address get the same
// answer, so SetWebhook cannot be used to map the operator's internal names.
func (s *Server) checkWebhookURL(ctx context.Context, raw string) (*url.URL, error) {
	if err := checkText("url", raw, MaxWebhookURLLen); err != nil {
		return nil, err
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return nil, errors.New("url must be an absolute http:// or https:// URL")
	}
	if u.User != nil {
		return nil, errors.New("url must not contain credentials (user:password@): authenticate deliveries with the Ludus-Signature header")
	}
	host := u.Hostname()
	if host == "" {
		return nil, errors.New("url must name a host")
	}
	u.Fragment, u.RawFragment = "", ""
	if s.allowPrivate {
		return u, nil
	}
	notPublic := fmt.Errorf("url host %q must be a public internet address or a name that resolves only to such addresses "+
		"(loopback, private, link-local, carrier-grade NAT and other special addresses are refused)", clip(host))
	if ip, err := netip.ParseAddr(host); err == nil {
		if !isPublicAddr(ip) {
			return nil, notPublic
		}
		return u, nil
	}
	lctx, cancel := context.WithTimeout(ctx, webhookLookupTimeout)
	defer cancel()
	ips, err := s.lookupIP(lctx, host)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, notPublic
	}
	if len(ips) == 0 {
		return nil, notPublic
	}
	for _, ip := range ips {
		if !isPublicAddr(ip) {
			return nil, notPublic
		}
	}
	return u, nil
}
