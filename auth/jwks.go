package auth

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
)

// StaticKeys is a fixed set of public keys by kid. It is a KeySource.
type StaticKeys map[string]ed25519.PublicKey

// Key implements KeySource.
func (s StaticKeys) Key(_ context.Context, kid string) (ed25519.PublicKey, error) {
	if k, ok := s[kid]; ok {
		return k, nil
	}
	return nil, fmt.Errorf("%w %s", ErrUnknownKey, quoteID(kid))
}

// jwk is an RFC 8037 OKP public key.
type jwk struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	Kid string `json:"kid"`
	X   string `json:"x"`
	Alg string `json:"alg,omitempty"`
	Use string `json:"use,omitempty"`
	// D is the private key; a public key set must never carry it.
	D *string `json:"d,omitempty"`
}

type jwkSet struct {
	Keys []jwk `json:"keys"`
}

// PublicJWKS returns the published keys as an RFC 8037 JWK set, sorted by kid:
//
//	{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"...","x":"...","alg":"EdDSA","use":"sig"}]}
func (s *KeySet) PublicJWKS() []byte {
	return s.Public().JWKS()
}

// JWKS encodes the keys as an RFC 8037 JWK set, sorted by kid.
func (s StaticKeys) JWKS() []byte {
	set := jwkSet{Keys: make([]jwk, 0, len(s))}
	for kid, pub := range s {
		set.Keys = append(set.Keys, jwk{Kty: "OKP", Crv: "Ed25519", Kid: kid, X: b64.EncodeToString(pub), Alg: "EdDSA", Use: "sig"})
	}
	sort.Slice(set.Keys, func(i, j int) bool { return set.Keys[i].Kid < set.Keys[j].Kid })
	b, err := json.Marshal(set)
	if err != nil {
		panic(err) // strings only: cannot fail
	}
	return b
}

// ParseJWKS decodes a JWK set of Ed25519 public keys. It rejects the whole set
// if any key is not an OKP/Ed25519 public key of 32 bytes with a kid, if alg or
// use say something else than EdDSA/sig, if a key carries private material, if
// two keys share a kid, or if there are no keys.
func ParseJWKS(data []byte) (StaticKeys, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&set); err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	// More would miss a stray ] or }: only the end of the input may follow.
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("jwks: trailing data after the key set")
	}
	if len(set.Keys) == 0 {
		return nil, errors.New("jwks: no keys")
	}
	out := make(StaticKeys, len(set.Keys))
	for i, raw := range set.Keys {
		var k jwk
		if err := json.Unmarshal(raw, &k); err != nil {
			return nil, fmt.Errorf("jwks: key %d: %w", i, err)
		}
		switch {
		case k.Kty != "OKP":
			return nil, fmt.Errorf("jwks: key %d: kty %q is not OKP", i, k.Kty)
		case k.Crv != "Ed25519":
			return nil, fmt.Errorf("jwks: key %d: crv %q is not Ed25519", i, k.Crv)
		case k.Alg != "" && k.Alg != "EdDSA":
			return nil, fmt.Errorf("jwks: key %d: alg %q is not EdDSA", i, k.Alg)
		case k.Use != "" && k.Use != "sig":
			return nil, fmt.Errorf("jwks: key %d: use %q is not sig", i, k.Use)
		case k.D != nil:
			return nil, fmt.Errorf("jwks: key %d: carries a private key (d)", i)
		case k.Kid == "" || len(k.Kid) > 128:
			return nil, fmt.Errorf("jwks: key %d: kid must be 1..128 bytes", i)
		}
		if _, dup := out[k.Kid]; dup {
			return nil, fmt.Errorf("jwks: duplicate kid %s", quoteID(k.Kid))
		}
		x, err := b64.Strict().DecodeString(k.X)
		if err != nil {
			return nil, fmt.Errorf("jwks: key %s: x is not base64url: %w", quoteID(k.Kid), err)
		}
		if len(x) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("jwks: key %s: x has %d bytes, want %d", quoteID(k.Kid), len(x), ed25519.PublicKeySize)
		}
		out[k.Kid] = ed25519.PublicKey(x)
	}
	return out, nil
}
