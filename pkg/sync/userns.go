package sync

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// UserNamespaces gives pods with hostUsers: false their own user
// namespace (pkg/userns, the runtime's support read from its status).
type UserNamespaces interface {
	// Mapping returns the pod's user namespace, the same for its life.
	Mapping(uid types.UID) (*runtimeapi.UserNamespace, error)
	// Supported says whether the runtime handler runs pods in user
	// namespaces, idmapped mounts included; an error is a handler the
	// runtime does not report.
	Supported(ctx context.Context, handler string) (bool, error)
}

// noUserNamespaces is the kubelet's refusal of a hostUsers: false pod on
// a runtime handler that cannot give it a user namespace, in its words;
// err, when set, is why support could not be read.
func noUserNamespaces(handler string, err error) error {
	msg := "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
	if handler != "" {
		msg = fmt.Sprintf("can't set `spec.hostUsers: false`, RuntimeClass handler %q does not support user namespaces", handler)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", msg, err)
	}
	return fmt.Errorf("%s", msg)
}

// userNamespace is the pod's own user namespace, nil for a pod in the
// node's (pkg/runtime names the node's). With sandbox set (the pass is
// about to make the pod's sandbox) it first checks that the pod's runtime
// handler supports user namespaces, as the kubelet does: an error fails
// the sandbox, and the pod never runs as the host's users instead.
func (w *Worker) userNamespace(ctx context.Context, pod *v1.Pod, sandbox bool) (*runtimeapi.UserNamespace, error) {
	if pod.Spec.HostUsers == nil || *pod.Spec.HostUsers {
		return nil, nil
	}
	if sandbox {
		handler, err := w.runtimeHandler(ctx, pod)
		if err != nil {
			return nil, err
		}
		if w.deps.userns == nil {
			return nil, noUserNamespaces(handler, nil)
		}
		if ok, err := w.deps.userns.Supported(ctx, handler); err != nil || !ok {
			return nil, noUserNamespaces(handler, err)
		}
	}
	if w.deps.userns == nil {
		return nil, noUserNamespaces("", nil)
	}
	return w.deps.userns.Mapping(pod.UID)
}
