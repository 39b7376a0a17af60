package clustercred_test

import (
	"errors"
	"strings"
	"testing"

	"ludus.dev/ludus/auth/clustercred"
)

const token = "cluster-token-0123456789"

func mustNode(t *testing.T, tok, id string) string {
	t.Helper()
	c, err := clustercred.Node(tok, id)
	if err != nil {
		t.Fatalf("Node(%q): %v", id, err)
	}
	return c
}

func TestNodeRoundTrip(t *testing.T) {
	for _, id := range []string{"simnode-1", "n", "a_b_c", "_", "-", strings.Repeat("Z", 64)} {
		c := mustNode(t, token, id)
		if !strings.HasPrefix(c, clustercred.NodePrefix+id+"_") {
			t.Fatalf("Node(%q) = %q", id, c)
		}
		got, ok := clustercred.VerifyNode(token, c)
		if !ok || got != id {
			t.Fatalf("VerifyNode(Node(%q)) = %q, %v", id, got, ok)
		}
		if again := mustNode(t, token, id); again != c {
			t.Fatalf("Node is not deterministic: %q then %q", c, again)
		}
	}
}

func TestNodeRefusesBadInput(t *testing.T) {
	for _, id := range []string{"", "a b", "a/b", "ü", "a.b", "a\x00", strings.Repeat("a", 65)} {
		if c, err := clustercred.Node(token, id); !errors.Is(err, clustercred.ErrBadNodeID) || c != "" {
			t.Errorf("Node(%q) = %q, %v; want ErrBadNodeID", id, c, err)
		}
	}
	if c, err := clustercred.Node("", "simnode-1"); !errors.Is(err, clustercred.ErrNoClusterToken) || c != "" {
		t.Errorf("Node with no token = %q, %v", c, err)
	}
	if c, err := clustercred.GatewayToNode(token, "a/b"); err == nil || c != "" {
		t.Errorf("GatewayToNode(bad id) = %q, %v", c, err)
	}
}

func TestVerifyNodeRefuses(t *testing.T) {
	c1 := mustNode(t, token, "simnode-1")
	c2 := mustNode(t, token, "simnode-2")
	other := mustNode(t, "another-cluster-token-0123", "simnode-1")
	mac1 := c1[len(c1)-43:]
	mac2 := c2[len(c2)-43:]
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	cases := map[string]struct{ tok, cred string }{
		"wrong token":                      {"another-cluster-token-0123", c1},
		"empty token":                      {"", c1},
		"credential of another cluster":    {token, other},
		"another node's MAC under my id":   {token, "lnd_simnode-1_" + mac2},
		"my MAC under another node's id":   {token, "lnd_simnode-2_" + mac1},
		"tampered MAC, first character":    {token, flip(c1, len(c1)-43)},
		"tampered MAC, last character":     {token, flip(c1, len(c1)-1)},
		"truncated":                        {token, c1[:len(c1)-1]},
		"extended":                         {token, c1 + "A"},
		"no prefix":                        {token, strings.TrimPrefix(c1, "lnd_")},
		"wrong prefix":                     {token, "lgn_" + strings.TrimPrefix(c1, "lnd_")},
		"upper-case prefix":                {token, "LND_" + strings.TrimPrefix(c1, "lnd_")},
		"empty":                            {token, ""},
		"only prefix":                      {token, "lnd_"},
		"no id":                            {token, "lnd__" + mac1},
		"separator replaced":               {token, "lnd_simnode-1-" + mac1},
		"invalid id character":             {token, "lnd_simnode/1_" + mac1},
		"padding":                          {token, c1 + "="},
		"standard base64 alphabet":         {token, "lnd_simnode-1_" + strings.Repeat("+", 43)},
		"the cluster token itself":         {token, token},
		"gateway-to-node credential":       {token, clustercred.ToNode(c1)},
		"id too long":                      {token, "lnd_" + strings.Repeat("a", 65) + "_" + mac1},
		"NUL in MAC":                       {token, c1[:len(c1)-1] + "\x00"},
		"leading space":                    {token, " " + c1},
		"trailing newline":                 {token, c1 + "\n"},
		"MAC of the right length, garbage": {token, "lnd_simnode-1_" + strings.Repeat("A", 43)},
	}
	for name, c := range cases {
		if id, ok := clustercred.VerifyNode(c.tok, c.cred); ok || id != "" {
			t.Errorf("%s: VerifyNode = %q, %v; want refused", name, id, ok)
		}
	}
}

func TestToNode(t *testing.T) {
	c1 := mustNode(t, token, "simnode-1")
	c2 := mustNode(t, token, "simnode-2")
	g1, err := clustercred.GatewayToNode(token, "simnode-1")
	if err != nil {
		t.Fatal(err)
	}
	if g1 != clustercred.ToNode(c1) || !strings.HasPrefix(g1, clustercred.ToNodePrefix) {
		t.Fatalf("GatewayToNode = %q, ToNode(Node) = %q", g1, clustercred.ToNode(c1))
	}
	if !clustercred.VerifyToNode(c1, g1) {
		t.Fatal("node 1 refuses its own gateway credential")
	}
	for name, presented := range map[string]string{
		"node 2's gateway credential": clustercred.ToNode(c2),
		"node 1's own credential":     c1,
		"the cluster token":           token,
		"empty":                       "",
		"truncated":                   g1[:len(g1)-1],
		"extended":                    g1 + "A",
	} {
		if clustercred.VerifyToNode(c1, presented) {
			t.Errorf("node 1 accepts %s", name)
		}
	}
	if clustercred.ToNode("") != "" || clustercred.VerifyToNode("", clustercred.ToNode("")) {
		t.Fatal("an empty node credential derives or accepts something")
	}
	if g1 == clustercred.ToNode(c2) {
		t.Fatal("two nodes get the same gateway credential")
	}
}

// TestValidNodeID pins the id rule of the fleet (clusterstate.ValidID): a
// node id is a path segment of an etcd key.
func TestValidNodeID(t *testing.T) {
	for id, want := range map[string]bool{
		"": false, "a": true, "simnode-1": true, "A_z-09": true, strings.Repeat("a", 64): true,
		strings.Repeat("a", 65): false, "a b": false, "a.b": false, "a/b": false, "ü": false, "\x00": false, "a:b": false,
	} {
		if got := clustercred.ValidNodeID(id); got != want {
			t.Errorf("ValidNodeID(%q) = %v, want %v", id, got, want)
		}
	}
}

func FuzzParseNode(f *testing.F) {
	good, _ := clustercred.Node(token, "simnode-1")
	for _, s := range []string{good, "", "lnd_", "lnd__", good + "x", good[:len(good)-1], "lnd_a_" + strings.Repeat("_", 43), "lgn_x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cred string) {
		id, ok := clustercred.ParseNode(cred)
		if !ok {
			if id != "" {
				t.Fatalf("ParseNode(%q) refused but returned id %q", cred, id)
			}
			if _, ok := clustercred.VerifyNode(token, cred); ok {
				t.Fatalf("VerifyNode accepts %q, which ParseNode refuses", cred)
			}
			return
		}
		if !clustercred.ValidNodeID(id) || cred != clustercred.NodePrefix+id+"_"+cred[len(cred)-43:] {
			t.Fatalf("ParseNode(%q) = %q: not the credential's id", cred, id)
		}
		want, err := clustercred.Node(token, id)
		if err != nil {
			t.Fatalf("Node(%q) after ParseNode accepted it: %v", id, err)
		}
		vid, vok := clustercred.VerifyNode(token, cred)
		if vok != (cred == want) || (vok && vid != id) {
			t.Fatalf("VerifyNode(%q) = %q, %v; the real credential of %q is %q", cred, vid, vok, id, want)
		}
	})
}

// A node started with the enrollment key derives the same credential the
// cluster token gives its id, which the backend (holding the token) accepts;
// the enrollment key itself passes for nothing.
func TestEnrollment(t *testing.T) {
	const token = "cluster-token-of-at-least-16"
	e, err := clustercred.Enrollment(token)
	if err != nil || !clustercred.ValidEnrollment(e) || !strings.HasPrefix(e, clustercred.EnrollmentPrefix) {
		t.Fatalf("Enrollment: %q %v", e, err)
	}
	fromToken, _ := clustercred.Node(token, "simnode-7f9c")
	fromEnrollment, err := clustercred.NodeFromEnrollment(e, "simnode-7f9c")
	if err != nil || fromEnrollment != fromToken {
		t.Fatalf("credential from the enrollment key %q (%v), from the token %q", fromEnrollment, err, fromToken)
	}
	if id, ok := clustercred.VerifyNode(token, fromEnrollment); !ok || id != "simnode-7f9c" {
		t.Fatalf("the backend refuses an enrolled node's credential: %q %v", id, ok)
	}
	// Another cluster's enrollment key makes credentials this cluster refuses.
	other, _ := clustercred.Enrollment("another-cluster-token-16")
	if c, _ := clustercred.NodeFromEnrollment(other, "simnode-7f9c"); c == fromToken {
		t.Fatal("two clusters' enrollment keys derive the same credential")
	} else if _, ok := clustercred.VerifyNode(token, c); ok {
		t.Fatal("a credential of another cluster's enrollment key verified")
	}
	// The enrollment key is neither a node credential nor the token.
	if _, ok := clustercred.VerifyNode(token, e); ok {
		t.Fatal("the enrollment key passed as a node credential")
	}
	if e == token || strings.Contains(e, token) {
		t.Fatal("the enrollment key reveals the token")
	}
	if _, err := clustercred.Enrollment(""); !errors.Is(err, clustercred.ErrNoClusterToken) {
		t.Fatalf("empty token: %v", err)
	}
	for _, bad := range []string{"", e[:len(e)-1], e + "A", "lnd_" + strings.TrimPrefix(e, "lne_"), "lne_" + strings.Repeat("+", 43), token} {
		if _, err := clustercred.NodeFromEnrollment(bad, "simnode-1"); !errors.Is(err, clustercred.ErrBadEnrollment) {
			t.Errorf("enrollment key %q: %v, want ErrBadEnrollment", bad, err)
		}
	}
	if _, err := clustercred.NodeFromEnrollment(e, "bad/id"); !errors.Is(err, clustercred.ErrBadNodeID) {
		t.Errorf("bad node id: %v", err)
	}
}
