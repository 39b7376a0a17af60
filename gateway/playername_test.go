package gateway

import (
	"testing"

	"ludus.dev/ludus/auth"
)

func TestPlayerName(t *testing.T) {
	for _, tc := range []struct {
		name, account, want string
	}{
		{"Ada", "a_7H3Q2", "Ada"},
		{"guest-1a2b", "a_7H3Q2", "guest-1a2b"}, // what the backend issues a guest
		{"", "a_7H3Q2", auth.GuestName("a_7H3Q2")},
		{"   ", "a_7H3Q2", auth.GuestName("a_7H3Q2")},
		{"", "", ""},
	} {
		if got := playerName(&auth.Claims{DisplayName: tc.name, AccountID: tc.account}); got != tc.want {
			t.Errorf("playerName(%q, %q) = %q, want %q", tc.name, tc.account, got, tc.want)
		}
	}
	if a, b := auth.GuestName("a_x"), auth.GuestName("a_y"); a == b || len(a) != len("guest-0000") {
		t.Errorf("guest names %q and %q", a, b)
	}
}
