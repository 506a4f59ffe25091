package probe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	utilexec "k8s.io/utils/exec"
)

// execProbe runs the command in the container: exit 0 is a success, any
// other exit a failure with the command's output, and a command still
// running at the timeout a failure. The timeout is the runtime's to
// enforce, as with the kubelet: the call itself is bounded by the
// runtime request timeout on top of it (runtime.Client.ExecSync), so a
// runtime slow to answer — restarting, or busy restoring its shims — is
// no verdict on the container, only an error (the result is kept), where
// a deadline of a few seconds would have counted it as a failed probe and
// restarted a healthy container.
func (c *checker) execProbe(ctx context.Context, t Target, cmd []string, timeout time.Duration) (outcome, string, error) {
	stdout, stderr, err := c.exec.ExecSync(ctx, t.ContainerID, cmd, timeout)
	out := limitOutput(append(stdout, stderr...))
	var exit utilexec.ExitError
	switch {
	case err == nil:
		return outcomeSuccess, out, nil
	case errors.As(err, &exit):
		if exit.ExitStatus() == 0 {
			return outcomeSuccess, out, nil
		}
		return outcomeFailure, out, nil
	case timedOut(err):
		return outcomeFailure, fmt.Sprintf("command %q timed out", strings.Join(cmd, " ")), nil
	}
	return outcomeFailure, "", err
}

// timedOut says whether an ExecSync error is the command's timeout, as
// the runtime or the call's own deadline reports it.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || grpcstatus.Code(errors.Unwrap(err)) == codes.DeadlineExceeded ||
		grpcstatus.Code(err) == codes.DeadlineExceeded
}

func limitOutput(b []byte) string {
	if len(b) > maxOutput {
		b = b[:maxOutput]
	}
	return string(b)
}
