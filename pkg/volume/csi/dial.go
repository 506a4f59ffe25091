package csi

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// maxSocketPath is the longest path a unix socket address holds: sun_path's
// 108 bytes less the terminating NUL.
const maxSocketPath = 107

// newClient is a gRPC client of the unix socket at path, over dialUnix.
func newClient(path string) (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			// gRPC hands a custom dialer of a unix target the target itself.
			return dialUnix(ctx, strings.TrimPrefix(strings.TrimPrefix(addr, "unix://"), "unix:"))
		}))
}

// dialUnix connects to the unix socket at path. A path longer than a socket address
// holds (a root dir deeper than /var/lib/kubelet and a driver named after a long
// namespace, as the upstream CSI mock specs make) is reached through its directory:
// the directory is opened and the socket dialed as /proc/self/fd/<n>/<name>, which
// the kernel resolves as it would the whole path.
func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	if len(path) <= maxSocketPath {
		return d.DialContext(ctx, "unix", path)
	}
	dir, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dial %s: open its directory: %w", path, err)
	}
	defer unix.Close(dir)
	short := fmt.Sprintf("/proc/self/fd/%d/%s", dir, filepath.Base(path))
	if len(short) > maxSocketPath {
		return nil, fmt.Errorf("dial %s: the socket's name is too long for a unix socket address", path)
	}
	conn, err := d.DialContext(ctx, "unix", short)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", path, err)
	}
	return conn, nil
}
