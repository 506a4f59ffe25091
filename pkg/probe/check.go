package probe

import (
	"context"
	"fmt"
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Target is the container a probe or hook is run against.
type Target struct {
	Pod       *v1.Pod
	Container *v1.Container
	// ContainerID is the runtime's ID (without the "containerd://" prefix).
	ContainerID string
	// PodIP is the host httpGet, tcpSocket and grpc handlers use when
	// they name none.
	PodIP string
}

// outcome is one run of a handler, before thresholds.
type outcome int

const (
	outcomeSuccess outcome = iota
	// outcomeWarning counts as a success, with a ProbeWarning event (an
	// HTTP redirect not followed).
	outcomeWarning
	outcomeFailure
)

// maxOutput bounds the output kept of a probe (command output, response
// body), as the kubelet keeps 10 KiB.
const maxOutput = 10 * 1024

// Execer runs a command in a container to completion (CRI ExecSync). A
// command exiting non-zero gives a k8s.io/utils/exec.ExitError.
type Execer interface {
	ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (stdout, stderr []byte, err error)
}

// checker runs the handlers of probes and hooks. It is safe for
// concurrent use: every probe goroutine shares it, and its one HTTP
// transport.
type checker struct {
	exec      Execer
	transport *http.Transport
	// version is the agent's Kubernetes "major.minor", for User-Agents.
	version string
}

// probe runs a probe's handler once within the probe's timeout.
func (c *checker) probe(ctx context.Context, t Target, p *v1.Probe) (outcome, string, error) {
	timeout := time.Duration(p.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = time.Second
	}
	h := &p.ProbeHandler
	switch {
	case h.Exec != nil:
		return c.execProbe(ctx, t, h.Exec.Command, timeout)
	case h.HTTPGet != nil:
		return c.httpProbe(ctx, t, h.HTTPGet, timeout)
	case h.TCPSocket != nil:
		return tcpProbe(ctx, t, h.TCPSocket, timeout)
	case h.GRPC != nil:
		return c.grpcProbe(ctx, t, h.GRPC, timeout)
	}
	return outcomeFailure, "", fmt.Errorf("missing probe handler for %s", t.Container.Name)
}
