package auth

import (
	"crypto/sha256"
	"encoding/hex"
)

// GuestName is the display name of an account that has none: "guest-" and
// four hex digits derived from the account id, so it is stable and the same
// wherever it is computed (the backend when it creates a guest, the gateway for
// a ticket that carries no name, leaderboards and match history).
func GuestName(accountID string) string {
	sum := sha256.Sum256([]byte(accountID))
	return "guest-" + hex.EncodeToString(sum[:2])
}
