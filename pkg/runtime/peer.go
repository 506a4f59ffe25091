package runtime

import (
	"context"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// PeerPID returns the process ID of whoever serves the runtime's socket,
// as the kernel vouches for it (SO_PEERCRED): the runtime's own process,
// whose cgroup is the runtime's system container.
func PeerPID(ctx context.Context, endpoint string) (int, error) {
	_, socket, err := ParseEndpoint(endpoint)
	if err != nil {
		return 0, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return 0, fmt.Errorf("dial %s: %w", socket, err)
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("peer of %s: %w", socket, err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, fmt.Errorf("peer of %s: %w", socket, err)
	}
	if credErr != nil {
		return 0, fmt.Errorf("peer of %s: %w", socket, credErr)
	}
	return int(cred.Pid), nil
}
