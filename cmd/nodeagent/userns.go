package main

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/pkg/runtime"
	podsync "github.com/nodeagent/nodeagent/pkg/sync"
	"github.com/nodeagent/nodeagent/pkg/userns"
)

// userNamespaceFiles are where the node's user-namespace range is read
// from (the kubelet's "kubelet" user and its subordinate IDs); tests
// point them elsewhere.
var userNamespaceFiles = userns.HostFiles

// newUserNamespaces makes the allocator of pods' user namespaces: the
// node's range, userNamespaces.idsPerPod IDs a pod, room for maxPods,
// and the mappings of the pods already on disk. An error stops the
// agent, as it stops the kubelet.
func newUserNamespaces(cfg *agentConfig, cri *runtime.Client) (*userNamespaces, error) {
	kc := cfg.kubelet
	idsPerPod := int64(userns.DefaultIDsPerPod)
	if kc.UserNamespaces != nil && kc.UserNamespaces.IDsPerPod != nil {
		idsPerPod = *kc.UserNamespaces.IDsPerPod
	}
	// Validated with the configuration; checked again before the cast.
	if err := userns.ValidateIDsPerPod(idsPerPod); err != nil {
		return nil, fmt.Errorf("user namespaces: %w", err)
	}
	r, err := userns.NodeRange(userNamespaceFiles, uint32(idsPerPod))
	if err != nil {
		return nil, fmt.Errorf("user namespaces: %w", err)
	}
	a, err := userns.New(userns.Config{RootDir: cfg.rootDir, IDsPerPod: idsPerPod, Range: r, MaxPods: int(kc.MaxPods)})
	if err != nil {
		return nil, fmt.Errorf("user namespaces: %w", err)
	}
	return &userNamespaces{Allocator: a, status: cri.Status}, nil
}

// userNamespaces is the allocator as the pod workers use it, with the
// runtime's word on which handlers support user namespaces.
type userNamespaces struct {
	*userns.Allocator
	status func(context.Context) (*runtimeapi.StatusResponse, error)
}

var _ podsync.UserNamespaces = (*userNamespaces)(nil)

// Mapping is the pod's slot as the runtime takes it.
func (u *userNamespaces) Mapping(uid types.UID) (*runtimeapi.UserNamespace, error) {
	m, err := u.Get(uid)
	if err != nil {
		return nil, err
	}
	return m.CRI(), nil
}

// Supported asks the runtime, at each sandbox of such a pod (few), what
// its handler supports, as the kubelet reads it from the runtime's
// status.
func (u *userNamespaces) Supported(ctx context.Context, handler string) (bool, error) {
	st, err := u.status(ctx)
	if err != nil {
		return false, err
	}
	return handlerSupportsUserNamespaces(st, handler)
}

// handlerSupportsUserNamespaces reads the handler's user-namespace
// support (idmapped mounts included) from the runtime's status, with
// the kubelet's errors for a runtime that lists no handlers and for a
// handler it does not list.
func handlerSupportsUserNamespaces(st *runtimeapi.StatusResponse, handler string) (bool, error) {
	handlers := st.GetRuntimeHandlers()
	if len(handlers) == 0 {
		return false, errors.New("runtime handlers are not set")
	}
	for _, h := range handlers {
		if h.GetName() == handler {
			return h.GetFeatures().GetUserNamespaces(), nil
		}
	}
	return false, fmt.Errorf("the handler %q is not known", handler)
}
