package sync

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// fakeUserNamespaces maps every pod onto one range and supports the handlers listed.
type fakeUserNamespaces struct {
	supported map[string]bool
	mappings  []types.UID
	mapErr    error
}

func (f *fakeUserNamespaces) Mapping(uid types.UID) (*runtimeapi.UserNamespace, error) {
	f.mappings = append(f.mappings, uid)
	if f.mapErr != nil {
		return nil, f.mapErr
	}
	ids := func() []*runtimeapi.IDMapping {
		return []*runtimeapi.IDMapping{{HostId: 131072, ContainerId: 0, Length: 65536}}
	}
	return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: ids(), Gids: ids()}, nil
}

func (f *fakeUserNamespaces) Supported(_ context.Context, handler string) (bool, error) {
	ok, known := f.supported[handler]
	if !known {
		return false, errors.New(`the handler "` + handler + `" is not known`)
	}
	return ok, nil
}

// sandboxUserNamespaces lists the user namespaces of the fake runtime's sandboxes.
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
// the allocator, in its sandbox's and every container's namespace options; any other pod
// names the node's, as the kubelet does.
func TestWorkerUserNamespaces(t *testing.T) {
	for _, tc := range []struct {
		name      string
		hostUsers *bool
		wantMode  runtimeapi.NamespaceMode
	}{
		{name: "hostUsers false", hostUsers: ptr.To(false), wantMode: runtimeapi.NamespaceMode_POD},
		{name: "hostUsers unset", wantMode: runtimeapi.NamespaceMode_NODE},
		{name: "hostUsers true", hostUsers: ptr.To(true), wantMode: runtimeapi.NamespaceMode_NODE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := basePod()
			pod.Spec.HostUsers = tc.hostUsers
			h := newHarness(t, pod)
			rec, _ := withInputs(h)
			userns := &fakeUserNamespaces{supported: map[string]bool{"": true}}
			h.w.deps.userns = userns
			h.sync(pod, false)
			pod = addEphemeral(pod, v1.EphemeralContainer{TargetContainerName: "a",
				EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "debugger", Image: "busybox"}})
			h.sync(pod, false)

			got := map[string]*runtimeapi.UserNamespace{}
			for i, ns := range h.sandboxUserNamespaces() {
				got["sandbox "+strconv.Itoa(i)] = ns
			}
			rec.mu.Lock()
			for name, cfg := range rec.configs {
				got[name] = cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()
			}
			rec.mu.Unlock()
			if len(got) != 4 {
				t.Fatalf("user namespaces of %d sandboxes and containers, want the sandbox, a, b and debugger: %v", len(got), got)
			}
			for what, ns := range got {
				if ns.GetMode() != tc.wantMode {
					t.Errorf("%s: user namespace %v, want mode %v", what, ns, tc.wantMode)
				}
				own := len(ns.GetUids()) == 1 && ns.GetUids()[0].GetHostId() == 131072 && len(ns.GetGids()) == 1
				if want := tc.wantMode == runtimeapi.NamespaceMode_POD; own != want {
					t.Errorf("%s: user namespace %v, want the pod's mappings: %v", what, ns, want)
				}
			}
			if asked := len(userns.mappings) > 0; asked != (tc.wantMode == runtimeapi.NamespaceMode_POD) {
				t.Errorf("mappings asked for %v", userns.mappings)
			}
			for _, uid := range userns.mappings {
				if uid != pod.UID {
					t.Errorf("mapping asked for %s, want the pod's %s", uid, pod.UID)
				}
			}
		})
	}
}

// TestWorkerUserNamespaceRefused: a pod with hostUsers: false whose runtime handler does
// not support user namespaces (or whose mapping cannot be had) gets no sandbox at all but
// the kubelet's FailedCreatePodSandBox, its containers waiting in ContainerCreating, and
// another try only after the back-off; it never runs as the host's users.
func TestWorkerUserNamespaceRefused(t *testing.T) {
	for _, tc := range []struct {
		name      string
		class     string // the pod's runtimeClassName
		userns    *fakeUserNamespaces
		wantEvent string
	}{
		{name: "default handler without support", userns: &fakeUserNamespaces{supported: map[string]bool{"": false}},
			wantEvent: "Warning FailedCreatePodSandBox Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces"},
		{name: "RuntimeClass handler without support", class: "sandboxed",
			userns:    &fakeUserNamespaces{supported: map[string]bool{"": true, "runsc": false}},
			wantEvent: "Warning FailedCreatePodSandBox Failed to create pod sandbox: can't set `spec.hostUsers: false`, RuntimeClass handler \"runsc\" does not support user namespaces"},
		{name: "handler the runtime does not report", class: "sandboxed", userns: &fakeUserNamespaces{supported: map[string]bool{"": true}},
			wantEvent: "Warning FailedCreatePodSandBox Failed to create pod sandbox: can't set `spec.hostUsers: false`, RuntimeClass handler \"runsc\" does not support user namespaces: the handler \"runsc\" is not known"},
		{name: "no allocator",
			wantEvent: "Warning FailedCreatePodSandBox Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces"},
		{name: "no slot left", userns: &fakeUserNamespaces{supported: map[string]bool{"": true},
			mapErr: errors.New("create user namespace: could not find an empty slot to allocate a user namespace")},
			wantEvent: "Warning FailedCreatePodSandBox Failed to create pod sandbox: create user namespace: could not find an empty slot to allocate a user namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := basePod()
			pod.Spec.HostUsers = ptr.To(false)
			if tc.class != "" {
				pod.Spec.RuntimeClassName = ptr.To(tc.class)
			}
			h := newHarness(t, pod)
			h.w.deps.runtimeClasses = fakeRuntimeClasses{"sandboxed": "runsc"}
			if tc.userns != nil {
				h.w.deps.userns = tc.userns
			}
			h.sync(pod, false)
			if events := h.events(); !strings.Contains(events, tc.wantEvent) {
				t.Errorf("events:\n%s\nwant %q", events, tc.wantEvent)
			}
			if n := h.runPodSandboxCalls(); n != 0 {
				t.Errorf("RunPodSandbox called %d times, want never", n)
			}
			h.rt.Lock()
			made := len(h.rt.Sandboxes) + len(h.rt.Containers)
			h.rt.Unlock()
			if made != 0 {
				t.Errorf("%d sandboxes and containers, want none", made)
			}
			h.wantPendingInContainerCreating(t)

			// Woken again at once, the worker waits out the back-off.
			h.sync(pod, false)
			if n := h.runPodSandboxCalls(); n != 0 {
				t.Errorf("RunPodSandbox called %d times within the back-off, want never", n)
			}
			if events := h.events(); events != "" {
				t.Errorf("events within the back-off:\n%s", events)
			}

			// Once it has passed, on a handler with support, the pod gets its sandbox, in
			// its own user namespace.
			h.w.state.sandboxRetry = h.w.state.sandboxRetry.Add(-sandboxBackoff)
			h.w.deps.userns = &fakeUserNamespaces{supported: map[string]bool{"": true, "runsc": true}}
			h.sync(pod, false)
			sandboxes := h.sandboxUserNamespaces()
			if len(sandboxes) != 1 || sandboxes[0].GetMode() != runtimeapi.NamespaceMode_POD {
				t.Errorf("sandboxes' user namespaces after the back-off: %v, want one of the pod's own", sandboxes)
			}
		})
	}
}
