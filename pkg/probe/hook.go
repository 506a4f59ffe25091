package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"
)

// RunHook runs a lifecycle handler (postStart or preStop) against the
// container and waits for it, or for ctx to end. On failure it returns the
// message the kubelet puts in the FailedPostStartHook / FailedPreStopHook
// event, and the error. An httpGet hook fails only when the request does;
// its status code does not matter.
func (m *Manager) RunHook(ctx context.Context, t Target, h *v1.LifecycleHandler) (string, error) {
	pod := fmt.Sprintf("%s_%s(%s)", t.Pod.Name, t.Pod.Namespace, t.Pod.UID)
	switch {
	case h.Exec != nil:
		stdout, stderr, err := m.check.exec.ExecSync(ctx, t.ContainerID, h.Exec.Command, 0)
		if err != nil {
			out := limitOutput(append(stdout, stderr...))
			return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v, message: %q",
				h.Exec.Command, t.Container.Name, pod, err, out), err
		}
		return "", nil
	case h.HTTPGet != nil:
		if err := m.httpHook(ctx, t, h.HTTPGet); err != nil {
			return fmt.Sprintf("HTTP lifecycle hook (%s) for Container %q in Pod %q failed - error: %v",
				h.HTTPGet.Path, t.Container.Name, pod, err), err
		}
		return "", nil
	case h.Sleep != nil:
		if err := m.sleepHook(ctx, h.Sleep.Seconds); err != nil {
			return fmt.Sprintf("Sleep lifecycle hook (%d) for Container %q in Pod %q failed - error: %v",
				h.Sleep.Seconds, t.Container.Name, pod, err), err
		}
		return "", nil
	}
	err := fmt.Errorf("invalid handler: %v", h)
	return fmt.Sprintf("Cannot run handler: %v", err), err
}

func (m *Manager) httpHook(ctx context.Context, t Target, h *v1.HTTPGetAction) error {
	req, err := m.check.newRequest(ctx, t, h, "kube-lifecycle")
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: m.check.transport, CheckRedirect: sameHostRedirects}).Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxOutput))
	return resp.Body.Close()
}

// errSleepCut is a sleep hook ended early because the container is being
// stopped for good (its grace period ran out).
var errSleepCut = errors.New("container terminated before sleep hook finished")

func (m *Manager) sleepHook(ctx context.Context, seconds int64) error {
	select {
	case <-ctx.Done():
		return errSleepCut
	case <-m.cfg.Clock.After(time.Duration(seconds) * time.Second):
		return nil
	}
}
