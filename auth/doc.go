// Package auth issues and verifies Ludus session tickets.
//
// # Tickets
//
// A session ticket is a JWT (RFC 7519) signed with Ed25519 ("EdDSA", RFC 8037).
// It proves, for TicketTTL (120 s), that an account of a tenant signed in. The
// backend issues tickets (AuthService); gateways verify them on every call.
//
// Header:
//
//	alg  "EdDSA"               the only algorithm a Verifier accepts
//	kid  key id                RFC 7638 thumbprint of the signing key
//	typ  "ludus-session+jwt"   explicit type (RFC 8725 §3.11), so no other JWT
//	                           signed by the same key can pass as a ticket
//
// Claims:
//
//	iss   "ludus"
//	aud   ["ludus-gateway"]
//	sub   account id
//	tid   tenant id
//	tsl   tenant slug
//	name  display name
//	iat, nbf  issue time (whole seconds)
//	exp   iat + 120 s
//	jti   random ticket id
//
// # Keys
//
// A KeySet holds the Ed25519 keys: the current key signs, and Rotate installs a
// new current key. A key that stopped signing stays published for KeyRetention
// (the ticket lifetime plus the verification leeway), so every ticket it signed
// verifies until it expires; after that it is no longer served and Prune drops
// it. The package does not persist anything: the backend stores each key with
// MarshalPrivate/ParsePrivate (PKCS #8) and rebuilds the set with NewKeySet.
//
// The public half is published as an RFC 8037 JWK set (KeySet.PublicJWKS,
// ParseJWKS); gateways in other processes fetch it with a JWKSClient.
//
// # Verification
//
// A Verifier pins the algorithm to EdDSA, requires a kid and the ticket typ,
// checks iss, aud, exp (required) and nbf with a Leeway of 5 s, and requires
// non-empty tid and sub. Every failure wraps ErrInvalidTicket and says why
// (expired, unknown signing key, bad signature, wrong audience, ...). Failures
// to fetch keys also wrap ErrKeysUnavailable, so callers can answer
// "unavailable, retry" rather than "unauthenticated".
package auth
