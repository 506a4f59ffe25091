package sync

import (
	"context"

	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
)

// RuntimeClasses resolves the RuntimeClass a pod names (node.k8s.io/v1)
// to the runtime handler its sandbox is created with.
type RuntimeClasses interface {
	// Handler returns the handler of the RuntimeClass called name. A
	// RuntimeClass that does not exist is a NotFound error, worded as the
	// kubelet's lister words it: runtimeclass.node.k8s.io "name" not found.
	Handler(ctx context.Context, name string) (string, error)
}

// runtimeHandler is the handler the pod's sandbox runs under: that of
// the RuntimeClass it names, else the node's default. An error (no such
// RuntimeClass) fails the sandbox's creation, as for the kubelet.
func (w *Worker) runtimeHandler(ctx context.Context, pod *v1.Pod) (string, error) {
	name := pod.Spec.RuntimeClassName
	if name == nil || *name == "" {
		return w.settings.runtimeHandler, nil
	}
	handler, err := w.deps.runtimeClasses.Handler(ctx, *name)
	if err != nil {
		return "", err
	}
	klog.FromContext(ctx).V(2).Info("Running pod with runtime handler", "runtimeClassName", *name, "runtimeHandler", handler)
	return handler, nil
}

// noRuntimeClasses knows of no RuntimeClass: a pod that names one cannot
// start.
type noRuntimeClasses struct{}

func (noRuntimeClasses) Handler(_ context.Context, name string) (string, error) {
	return "", apierrors.NewNotFound(nodev1.Resource("runtimeclass"), name)
}
