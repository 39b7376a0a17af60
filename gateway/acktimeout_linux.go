package gateway

import (
	"crypto/tls"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// setAckTimeout sets TCP_USER_TIMEOUT on c's socket: the kernel closes the
// connection when data sent on it stays unacknowledged for d. Best effort:
// a connection that is not TCP (a test's pipe, a Unix socket) is left as is.
func setAckTimeout(c net.Conn, d time.Duration) {
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok || d <= 0 {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d/time.Millisecond))
	})
}
