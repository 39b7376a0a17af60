package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"ludus.dev/ludus/auth/clustercred"
)

func TestCtlNodeCredential(t *testing.T) {
	t.Setenv("LUDUS_CLUSTER_TOKEN", "a-cluster-token-of-some-length")
	var out bytes.Buffer
	if err := runCtl(context.Background(), []string{"node", "credential", "node-7"}, &out); err != nil {
		t.Fatal(err)
	}
	cred := strings.TrimSpace(out.String())
	if id, ok := clustercred.VerifyNode("a-cluster-token-of-some-length", cred); !ok || id != "node-7" {
		t.Fatalf("printed %q: not node-7's credential", cred)
	}
	if err := runCtl(context.Background(), []string{"node", "credential", "bad/id"}, &out); err == nil {
		t.Fatal("a credential was derived for an invalid node id")
	}
	t.Setenv("LUDUS_CLUSTER_TOKEN", "")
	if err := runCtl(context.Background(), []string{"node", "credential", "node-7"}, &out); err == nil || !strings.Contains(err.Error(), "LUDUS_CLUSTER_TOKEN") {
		t.Fatalf("without the token: err = %v", err)
	}
}

func TestCtlNodeEnrollmentKey(t *testing.T) {
	t.Setenv("LUDUS_CLUSTER_TOKEN", "a-cluster-token-of-some-length")
	var out bytes.Buffer
	if err := runCtl(context.Background(), []string{"node", "enrollment-key"}, &out); err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(out.String())
	cred, err := clustercred.NodeFromEnrollment(key, "pod-x1")
	if err != nil {
		t.Fatalf("printed %q: %v", key, err)
	}
	if id, ok := clustercred.VerifyNode("a-cluster-token-of-some-length", cred); !ok || id != "pod-x1" {
		t.Fatalf("a credential derived from the printed key is refused")
	}
	t.Setenv("LUDUS_CLUSTER_TOKEN", "")
	if err := runCtl(context.Background(), []string{"node", "enrollment-key"}, &out); err == nil || !strings.Contains(err.Error(), "LUDUS_CLUSTER_TOKEN") {
		t.Fatalf("without the token: err = %v", err)
	}
}

func TestSimnodeCredentialFlags(t *testing.T) {
	t.Setenv("LUDUS_CLUSTER_TOKEN", "")
	t.Setenv("LUDUS_NODE_CREDENTIAL", "")
	t.Setenv("LUDUS_NODE_ENROLLMENT_KEY", "")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for args, want := range map[string]string{
		"--node-credential lnd_x_y --cluster-token t":           "not several",
		"--node-enrollment-key lne_x --node-credential lnd_x_y": "not several",
		"--node-credential lnd_x_y --drain-timeout 0s":          "--drain-timeout must be positive",
		"":                       "--node-credential is required",
		"--cluster-token-typo t": "flag provided but not defined",
	} {
		err := runSimnode(context.Background(), strings.Fields(args), quiet)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("simnode %s: err = %v, want %q", args, err, want)
		}
	}
}
