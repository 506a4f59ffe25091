package sync

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// fakeUserNamespaces maps every pod onto one range and supports the handlers listed.
type fakeUserNamespaces struct {
	supported map[string]bool
	mappings  []types.UID
}

func (f *fakeUserNamespaces) Mapping(uid types.UID) (*runtimeapi.UserNamespace, error) {
	f.mappings = append(f.mappings, uid)
	ids := []*runtimeapi.IDMapping{{HostId: 65536, ContainerId: 0, Length: 65536}}
	return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: ids, Gids: ids}, nil
}

func (f *fakeUserNamespaces) Supported(_ context.Context, handler string) (bool, error) {
	ok, known := f.supported[handler]
	if !known {
		return false, errors.New("the handler \"" + handler + "\" is not known")
	}
	return ok, nil
}

func (h *harness) sandboxUserNamespaces() []*runtimeapi.UserNamespace {
	h.rt.Lock()
	defer h.rt.Unlock()
	var out []*runtimeapi.UserNamespace
	for _, sb := range h.rt.Sandboxes {
		out = append(out, sb.GetLinux().GetNamespaces().GetOptions().GetUsernsOptions())
	}
	return out
}

// TestWorkerUserNamespaces: a pod with hostUsers: false gets its own user namespace from
// the allocator, in its sandbox's namespace options; on a runtime handler without
// support it gets no sandbox at all, but the kubelet's FailedCreatePodSandBox, and never
// runs as the host's users; a pod of the host's user namespace asks for none.
func TestWorkerUserNamespaces(t *testing.T) {
	for _, tc := range []struct {
		name      string
		hostUsers *bool
		userns    *fakeUserNamespaces
		wantNS    bool
		wantEvent string
	}{
		{name: "hostUsers false on a supporting handler", hostUsers: ptr.To(false),
			userns: &fakeUserNamespaces{supported: map[string]bool{"": true}}, wantNS: true},
		{name: "hostUsers false on a handler without support", hostUsers: ptr.To(false),
			userns:    &fakeUserNamespaces{supported: map[string]bool{"": false}},
			wantEvent: "Warning FailedCreatePodSandBox Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces"},
		{name: "hostUsers false, no allocator", hostUsers: ptr.To(false),
			wantEvent: "Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces"},
		{name: "hostUsers false on a handler the runtime does not report", hostUsers: ptr.To(false),
			userns:    &fakeUserNamespaces{supported: map[string]bool{"other": true}},
			wantEvent: "Failed to create pod sandbox: can't set `spec.hostUsers: false`: the handler \"\" is not known"},
		{name: "hostUsers unset", userns: &fakeUserNamespaces{supported: map[string]bool{"": true}}},
		{name: "hostUsers true", hostUsers: ptr.To(true), userns: &fakeUserNamespaces{supported: map[string]bool{"": true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := basePod()
			pod.Spec.HostUsers = tc.hostUsers
			h := newHarness(t, pod)
			if tc.userns != nil {
				h.w.deps.userns = tc.userns
			}
			h.sync(pod, false)
			ns := h.sandboxUserNamespaces()
			switch {
			case tc.wantEvent != "":
				if events := h.events(); !strings.Contains(events, tc.wantEvent) {
					t.Errorf("events:\n%s\nwant %q", events, tc.wantEvent)
				}
				if len(ns) != 0 || h.runPodSandboxCalls() != 0 {
					t.Errorf("%d sandboxes, %d RunPodSandbox calls; want none", len(ns), h.runPodSandboxCalls())
				}
			case tc.wantNS:
				if len(ns) != 1 || ns[0].GetMode() != runtimeapi.NamespaceMode_POD || len(ns[0].GetUids()) != 1 || ns[0].GetUids()[0].GetHostId() != 65536 {
					t.Errorf("sandboxes' user namespaces %v, want the pod's own", ns)
				}
				if len(tc.userns.mappings) == 0 || tc.userns.mappings[0] != pod.UID {
					t.Errorf("mappings asked for %v, want the pod's", tc.userns.mappings)
				}
			default:
				if len(ns) != 1 || ns[0] != nil {
					t.Errorf("sandboxes' user namespaces %v, want one sandbox in the host's", ns)
				}
				if tc.userns != nil && len(tc.userns.mappings) != 0 {
					t.Errorf("mappings asked for %v, want none", tc.userns.mappings)
				}
			}
		})
	}
}
