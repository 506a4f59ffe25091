package probe

import (
	"context"
	"net"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
)

// tcpProbe opens a TCP connection to the port and closes it at once.
func tcpProbe(ctx context.Context, t Target, h *v1.TCPSocketAction, timeout time.Duration) (outcome, string, error) {
	host := h.Host
	if host == "" {
		host = t.PodIP
	}
	port, err := resolvePort(h.Port, t.Container)
	if err != nil {
		return outcomeFailure, "", err
	}
	d := probeDialer()
	d.Timeout = timeout
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return outcomeFailure, err.Error(), nil
	}
	_ = conn.Close()
	return outcomeSuccess, "", nil
}
