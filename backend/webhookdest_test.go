package backend

import (
	"net/netip"
	"testing"
)

func TestIsPublicAddr(t *testing.T) {
	for s, want := range map[string]bool{
		"93.184.215.14": true, "8.8.8.8": true, "2606:4700::1111": true, "2001:4860:4860::8888": true,
		"64:ff9b::808:808": true, "2002:808:808::1": true, "::ffff:8.8.8.8": true,
		"127.0.0.1": false, "127.255.0.9": false, "10.1.1.1": false, "172.31.255.255": false, "192.168.0.1": false,
		"169.254.169.254": false, "100.64.0.1": false, "100.127.255.255": false, "0.0.0.0": false, "0.1.2.3": false,
		"224.0.0.251": false, "255.255.255.255": false, "240.0.0.1": false, "198.18.0.1": false,
		"::": false, "::1": false, "fe80::1": false, "fc00::1": false, "fd00::1": false, "ff02::1": false, "fec0::1": false,
		"::ffff:127.0.0.1": false, "::ffff:10.0.0.1": false, "::127.0.0.1": false, "64:ff9b::7f00:1": false,
		"64:ff9b:1::1": false, "2002:7f00:1::": false, "2002:a00:1::": false, "::ffff:0:7f00:1": false, "2001::1": false,
	} {
		if got := isPublicAddr(netip.MustParseAddr(s)); got != want {
			t.Errorf("isPublicAddr(%s) = %v, want %v", s, got, want)
		}
	}
	if isPublicAddr(netip.Addr{}) {
		t.Error("the zero address is public")
	}
}
