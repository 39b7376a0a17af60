package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"ludus.dev/ludus/auth/clustercred"
)

// nodeCredential prints the credential a sim node runs with
// (--node-credential), derived from the cluster token in
// $LUDUS_CLUSTER_TOKEN. It needs no server: whoever holds the token can
// derive every node's credential, and a node holding only its own can derive
// nothing else.
func nodeCredential(nodeID string, out io.Writer) error {
	token := os.Getenv("LUDUS_CLUSTER_TOKEN")
	if token == "" {
		return errors.New("node credential: set LUDUS_CLUSTER_TOKEN to the cluster token (the backend's and gateways' --cluster-token)")
	}
	cred, err := clustercred.Node(token, nodeID)
	if err != nil {
		return fmt.Errorf("node credential for %q: %w", nodeID, err)
	}
	_, err = fmt.Fprintln(out, cred)
	return err
}

// nodeEnrollmentKey prints the enrollment key of the cluster token in
// $LUDUS_CLUSTER_TOKEN: sim nodes started with it (--node-enrollment-key)
// derive their own credential for their id. It has every node's power and no
// more (package clustercred).
func nodeEnrollmentKey(out io.Writer) error {
	token := os.Getenv("LUDUS_CLUSTER_TOKEN")
	if token == "" {
		return errors.New("node enrollment key: set LUDUS_CLUSTER_TOKEN to the cluster token (the backend's and gateways' --cluster-token)")
	}
	key, err := clustercred.Enrollment(token)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, key)
	return err
}
