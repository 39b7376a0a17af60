package gateway

import (
	"testing"

	"ludus.dev/ludus/auth"
)

func TestPlayerName(t *testing.T) {
	for _, tc := range []struct {
		name, account, want string
	}{
		{"Ada", "acc_7H3Q2", "Ada"},
		{"", "acc_7H3Q2", "guest-h3q2"},
		{"   ", "acc_7H3Q2", "guest-h3q2"},
		{"", "ab", "guest-ab"},
		{"", "", ""},
	} {
		if got := playerName(&auth.Claims{DisplayName: tc.name, AccountID: tc.account}); got != tc.want {
			t.Errorf("playerName(%q, %q) = %q, want %q", tc.name, tc.account, got, tc.want)
		}
	}
}
