package auth

import (
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzParseJWKS: a JWK set reaches a gateway over the network, from the
// backend. Parsing never panics; a rejected document gives an error and no
// keys; an accepted one is exactly one JSON value (nothing before or after
// it), holds 1 or more Ed25519 public keys of 32 bytes under kids of 1 to 128
// bytes, and encodes (JWKS) to a set that parses to the same keys.
func FuzzParseJWKS(f *testing.F) {
	fx := newFixture(f)
	f.Add(fx.keys.PublicJWKS())
	if _, err := fx.keys.Rotate(); err != nil {
		f.Fatal(err)
	}
	f.Add(fx.keys.PublicJWKS()) // two keys
	x := b64.EncodeToString(ed25519.NewKeyFromSeed(make([]byte, 32)).Public().(ed25519.PublicKey))
	key := `{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + x + `"}`
	for _, doc := range []string{
		`{"keys":[` + key + `]}`,
		`{"keys":[` + key + `,{"kty":"OKP","crv":"Ed25519","kid":"b","x":"` + x + `","alg":"EdDSA","use":"sig"}]}`,
		` {"keys":[` + key + `]} `,
		`{"keys":[` + key + `]}]`,
		`{"keys":[` + key + `]}}`,
		`{"keys":[` + key + `]} {}`,
		`{"keys":[` + strings.Replace(key, `"kid":"a"`, `"kid":"a\u00e9\ud800"`, 1) + `]}`,
		`{"keys":[` + strings.Replace(key, `}`, `,"d":null}`, 1) + `]}`,
		`{"KEYS":[{"KTY":"OKP","Crv":"Ed25519","KID":"a","X":"` + x + `"}]}`,
		`{"keys":[null]}`,
		`{"keys":null}`,
		`null`,
		`{"keys":[` + key + `],"keys":[]}`,
	} {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		keys, err := ParseJWKS(data)
		if err != nil {
			if keys != nil {
				t.Fatalf("rejected (%v) but returned %v", err, keys)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted %q, which is not one JSON value", data)
		}
		if len(keys) == 0 {
			t.Fatalf("accepted %q without keys", data)
		}
		for kid, k := range keys {
			if len(kid) == 0 || len(kid) > 128 || len(k) != ed25519.PublicKeySize {
				t.Fatalf("accepted kid %q (%d bytes) with a key of %d bytes", kid, len(kid), len(k))
			}
		}
		again, err := ParseJWKS(keys.JWKS())
		if err != nil {
			t.Fatalf("the set parsed from %q does not parse once encoded: %v", data, err)
		}
		if len(again) != len(keys) {
			t.Fatalf("round trip: %d keys became %d", len(keys), len(again))
		}
		for kid, k := range keys {
			if !k.Equal(again[kid]) {
				t.Fatalf("round trip changed key %q", kid)
			}
		}
	})
}
