package sync

import (
	"context"
	"errors"
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
	// namespaces, volumes included; an error is a handler the runtime
	// does not report.
	Supported(ctx context.Context, handler string) (bool, error)
}

// errNoUserNamespaces is the kubelet's refusal of a hostUsers: false pod
// on a runtime handler that cannot give it a user namespace.
var errNoUserNamespaces = errors.New("can't set `spec.hostUsers: false`, runtime does not support user namespaces")

// hostUsers says whether the pod runs in the host's user namespace.
func hostUsers(pod *v1.Pod) bool {
	return pod.Spec.HostUsers == nil || *pod.Spec.HostUsers
}

// userNamespace is the pod's own user namespace, nil for a pod in the
// host's. With sandbox set (the pass is about to make the pod's sandbox)
// it first checks that the pod's runtime handler supports it: the pod
// never runs as the host's users instead.
func (w *Worker) userNamespace(ctx context.Context, pod *v1.Pod, sandbox bool) (*runtimeapi.UserNamespace, error) {
	if hostUsers(pod) {
		return nil, nil
	}
	if w.deps.userns == nil {
		return nil, errNoUserNamespaces
	}
	if sandbox {
		handler, err := w.runtimeHandler(ctx, pod)
		if err != nil {
			return nil, err
		}
		ok, err := w.deps.userns.Supported(ctx, handler)
		if err != nil {
			return nil, fmt.Errorf("can't set `spec.hostUsers: false`: %w", err)
		}
		if !ok {
			return nil, errNoUserNamespaces
		}
	}
	return w.deps.userns.Mapping(pod.UID)
}
