//go:build !linux

package gateway

import (
	"net"
	"time"
)

// setAckTimeout does nothing where TCP_USER_TIMEOUT is not available: there,
// a vanished HTTP/1.1 client is noticed when TCP gives up on its own.
func setAckTimeout(net.Conn, time.Duration) {}
