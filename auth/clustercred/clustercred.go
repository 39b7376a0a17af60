// Package clustercred derives least-privilege credentials from the cluster
// token, so that a sim node holds a secret that is good for that node alone.
//
// The cluster token is the root secret of a Ludus cluster: the backend, the
// gateways and fleet control hold it. From it comes the enrollment key, and
// from that and a node's id the node credential:
//
//	lne_<base64url(HMAC-SHA256(key = cluster token, "ludus node enrollment v1"))>
//	lnd_<node id>_<base64url(HMAC-SHA256(key = enrollment key, "ludus node credential v2\x00" + node id))>
//
// The enrollment key exists for fleets whose node ids are not known in advance
// (a Kubernetes Deployment names its pods at random): a node started with it
// derives its own credential for its id and uses only that. Whoever holds it
// can derive any node's credential — so it has every node's power, fetching
// modules and archiving games — but nothing more: it is not the cluster token
// and cannot become it.
//
// A sim node is started with its own node credential only (never the cluster
// token). It presents it to the backend, which recomputes it (VerifyNode) and
// lets a node do what nodes need (fetch modules, archive games) but not what
// only gateways may do (mint match credentials, register match rosters).
//
// Calls the other way, from a gateway or fleet control to a node, carry a
// second credential derived from the node credential (ToNode):
//
//	lgn_<base64url(HMAC-SHA256(key = node credential, "ludus gateway to node v1"))>
//
// Holders of the cluster token can compute it for any node; the node can check
// it with its own credential alone. What a node cannot do with its credential:
// compute another node's credential (it would need the enrollment key or the
// cluster token), present the cluster token to the backend, or call another
// node (the other node wants ToNode of its own credential).
//
// Every check compares in constant time. The derivations are versioned ("v1",
// "v2" in the MAC input) and domain-separated, so one can never pass as the
// other.
package clustercred

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"strings"
)

// Prefixes of the derived credentials.
const (
	EnrollmentPrefix = "lne_"
	NodePrefix       = "lnd_"
	ToNodePrefix     = "lgn_"
)

// MaxNodeIDLen is the longest node id (the fleet's id rule).
const MaxNodeIDLen = 64

// macLen is the length of a base64url (unpadded) HMAC-SHA256.
var macLen = base64.RawURLEncoding.EncodedLen(sha256.Size)

// Errors of Node.
var (
	// ErrNoClusterToken: the cluster token is empty (an HMAC keyed with
	// nothing is a credential anyone can compute).
	ErrNoClusterToken = errors.New("clustercred: no cluster token")
	// ErrBadNodeID: the node id is not 1..64 characters of A-Z, a-z, 0-9,
	// "-" and "_".
	ErrBadNodeID = errors.New("clustercred: invalid node id (1..64 characters of A-Z, a-z, 0-9, \"-\" and \"_\")")
)

// ValidNodeID reports whether id can be a node id: 1..64 characters of A-Z,
// a-z, 0-9, "-" and "_", the fleet's rule for every id that becomes an etcd
// key segment (clusterstate.ValidID; not imported: this package must not
// depend on etcd).
func ValidNodeID(id string) bool {
	if len(id) == 0 || len(id) > MaxNodeIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func mac(key, msg string) string {
	h := hmac.New(sha256.New, []byte(key))
	h.Write([]byte(msg))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// Enrollment returns the enrollment key of clusterToken (ErrNoClusterToken if
// it is empty).
func Enrollment(clusterToken string) (string, error) {
	if clusterToken == "" {
		return "", ErrNoClusterToken
	}
	return EnrollmentPrefix + mac(clusterToken, "ludus node enrollment v1"), nil
}

// ValidEnrollment reports whether key has the shape of an enrollment key
// ("lne_" and 43 base64url characters); only deriving a credential with it
// and having the backend accept that credential authenticates it.
func ValidEnrollment(key string) bool {
	m, ok := strings.CutPrefix(key, EnrollmentPrefix)
	return ok && len(m) == macLen && isBase64URL(m)
}

// ErrBadEnrollment: the enrollment key is not "lne_" and 43 base64url
// characters (ludus ctl node enrollment-key prints one).
var ErrBadEnrollment = errors.New(`clustercred: invalid enrollment key (want "lne_" and 43 base64url characters, as "ludus ctl node enrollment-key" prints)`)

// NodeFromEnrollment returns the node credential of nodeID under the
// enrollment key: what a node started with the enrollment key runs with.
func NodeFromEnrollment(enrollment, nodeID string) (string, error) {
	if !ValidEnrollment(enrollment) {
		return "", ErrBadEnrollment
	}
	if !ValidNodeID(nodeID) {
		return "", ErrBadNodeID
	}
	return NodePrefix + nodeID + "_" + mac(enrollment, "ludus node credential v2\x00"+nodeID), nil
}

// Node returns the node credential of nodeID under clusterToken.
// ErrNoClusterToken if the token is empty; ErrBadNodeID if the id is invalid.
func Node(clusterToken, nodeID string) (string, error) {
	e, err := Enrollment(clusterToken)
	if err != nil {
		return "", err
	}
	return NodeFromEnrollment(e, nodeID)
}

// ParseNode splits a node credential into its node id and MAC without
// checking the MAC: ok is false unless credential has the shape
// "lnd_<valid node id>_<43 base64url characters>". Use VerifyNode to
// authenticate one; ParseNode only tells which node a credential claims to be.
func ParseNode(credential string) (nodeID string, ok bool) {
	rest, ok := strings.CutPrefix(credential, NodePrefix)
	// The MAC has a fixed length and base64url may contain "_", so split
	// from the end: "<id>_<mac>".
	if !ok || len(rest) < 1+1+macLen || len(rest) > MaxNodeIDLen+1+macLen {
		return "", false
	}
	sep := len(rest) - macLen - 1
	id, m := rest[:sep], rest[sep+1:]
	if rest[sep] != '_' || !ValidNodeID(id) || !isBase64URL(m) {
		return "", false
	}
	return id, true
}

func isBase64URL(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// VerifyNode checks a node credential against clusterToken and returns the
// node it belongs to. ok is false for an empty token, a malformed credential
// or a wrong MAC (compared in constant time).
func VerifyNode(clusterToken, credential string) (nodeID string, ok bool) {
	id, ok := ParseNode(credential)
	if !ok {
		return "", false
	}
	want, err := Node(clusterToken, id)
	if err != nil {
		return "", false
	}
	// Same length by construction (ParseNode fixed the MAC's length).
	if subtle.ConstantTimeCompare([]byte(want), []byte(credential)) != 1 {
		return "", false
	}
	return id, true
}

// ToNode returns the credential a gateway or fleet control presents when
// calling the node whose credential is nodeCredential. The node checks it
// with VerifyToNode, knowing only its own credential. An empty
// nodeCredential gives "" (nothing to derive from).
func ToNode(nodeCredential string) string {
	if nodeCredential == "" {
		return ""
	}
	return ToNodePrefix + mac(nodeCredential, "ludus gateway to node v1")
}

// GatewayToNode is ToNode of nodeID's credential under clusterToken: what a
// holder of the cluster token sends to that node.
func GatewayToNode(clusterToken, nodeID string) (string, error) {
	c, err := Node(clusterToken, nodeID)
	if err != nil {
		return "", err
	}
	return ToNode(c), nil
}

// VerifyToNode reports whether presented is ToNode(nodeCredential), in
// constant time. False if nodeCredential is empty.
func VerifyToNode(nodeCredential, presented string) bool {
	if nodeCredential == "" {
		return false
	}
	// Only the length (public: fixed by the format) can leak.
	return subtle.ConstantTimeCompare([]byte(ToNode(nodeCredential)), []byte(presented)) == 1
}
