package sync

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/pkg/status"
)

// fakeRuntimeClasses maps RuntimeClass names to their handlers.
type fakeRuntimeClasses map[string]string

func (f fakeRuntimeClasses) Handler(_ context.Context, name string) (string, error) {
	if h, ok := f[name]; ok {
		return h, nil
	}
	return "", apierrors.NewNotFound(nodev1.Resource("runtimeclass"), name)
}

func withRuntimeClass(name string) func(*v1.Pod) {
	return func(p *v1.Pod) { p.Spec.RuntimeClassName = ptr.To(name) }
}

func TestRuntimeHandlerOfPod(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mutate  func(*v1.Pod)
		want    string
		wantErr string
	}{
		{name: "no runtimeClassName: the node's default", want: "node-default"},
		{name: "empty runtimeClassName: the node's default", mutate: withRuntimeClass(""), want: "node-default"},
		{name: "the RuntimeClass's handler", mutate: withRuntimeClass("sandboxed"), want: "runsc"},
		{name: "no such RuntimeClass", mutate: withRuntimeClass("missing"),
			wantErr: `runtimeclass.node.k8s.io "missing" not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := basePod()
			if tc.mutate != nil {
				tc.mutate(pod)
			}
			w := &Worker{deps: &deps{runtimeClasses: fakeRuntimeClasses{"sandboxed": "runsc"}},
				settings: &settings{runtimeHandler: "node-default"}}
			got, err := w.runtimeHandler(context.Background(), pod)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("handler = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// sandboxHandlers lists the runtime handlers of the fake runtime's sandboxes.
func (h *harness) sandboxHandlers() []string {
	h.rt.Lock()
	defer h.rt.Unlock()
	var out []string
	for _, sb := range h.rt.Sandboxes {
		out = append(out, sb.RuntimeHandler)
	}
	return out
}

func (h *harness) runPodSandboxCalls() int {
	h.rt.Lock()
	defer h.rt.Unlock()
	n := 0
	for _, c := range h.rt.Called {
		if c == "RunPodSandbox" {
			n++
		}
	}
	return n
}

func TestWorkerRunsSandboxUnderItsRuntimeClass(t *testing.T) {
	pod := basePod(withRuntimeClass("sandboxed"))
	h := newHarness(t, pod)
	h.w.deps.runtimeClasses = fakeRuntimeClasses{"sandboxed": "runsc"}
	h.sync(pod, false)
	if got := h.sandboxHandlers(); len(got) != 1 || got[0] != "runsc" {
		t.Errorf("sandbox handlers = %q, want the RuntimeClass's [runsc]", got)
	}
	if got := h.containers(runtimeapi.ContainerState_CONTAINER_RUNNING); len(got) != 2 {
		t.Errorf("running containers = %v, want a and b", got)
	}
}

// A sandbox that cannot be made (no such RuntimeClass, a handler the
// runtime does not know) shows as the kubelet shows it: a
// FailedCreatePodSandBox event with the cause, containers waiting in
// ContainerCreating, and another try only after the back-off.
func TestWorkerSandboxFailures(t *testing.T) {
	unknownHandler := `failed to get sandbox runtime: no runtime for "no-such-handler" is configured`
	for _, tc := range []struct {
		name      string
		classes   fakeRuntimeClasses
		injectErr error
		wantEvent string
		wantCalls int // RunPodSandbox calls in the failed pass
	}{
		{name: "no such RuntimeClass", classes: fakeRuntimeClasses{},
			wantEvent: `Warning FailedCreatePodSandBox Failed to create pod sandbox: runtimeclass.node.k8s.io "sandboxed" not found`},
		{name: "handler unknown to the runtime", classes: fakeRuntimeClasses{"sandboxed": "no-such-handler"},
			// The CRI client wraps the runtime's error; the event shows it bare.
			injectErr: fmt.Errorf("CRI RunPodSandbox: %w", grpcstatus.Error(codes.Unknown, unknownHandler)),
			wantEvent: "Warning FailedCreatePodSandBox Failed to create pod sandbox: rpc error: code = Unknown desc = " + unknownHandler,
			wantCalls: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := basePod(withRuntimeClass("sandboxed"))
			h := newHarness(t, pod)
			h.w.deps.runtimeClasses = tc.classes
			if tc.injectErr != nil {
				h.rt.InjectError("RunPodSandbox", tc.injectErr)
			}
			h.sync(pod, false)
			if events := h.events(); !strings.Contains(events, tc.wantEvent) {
				t.Errorf("events:\n%s\nwant %q", events, tc.wantEvent)
			}
			if n := len(h.sandboxHandlers()); n != 0 {
				t.Errorf("%d sandboxes, want none", n)
			}
			h.wantPendingInContainerCreating(t)
			if got := h.runPodSandboxCalls(); got != tc.wantCalls {
				t.Errorf("RunPodSandbox called %d times, want %d", got, tc.wantCalls)
			}

			// Woken again at once (the failure changed the runtime, a relist
			// follows), the worker waits out the back-off.
			h.sync(pod, false)
			if got := h.runPodSandboxCalls(); got != tc.wantCalls {
				t.Errorf("RunPodSandbox called %d times within the back-off, want %d", got, tc.wantCalls)
			}
			if events := h.events(); events != "" {
				t.Errorf("events within the back-off:\n%s", events)
			}

			// Once it has passed, with the RuntimeClass fixed, the sandbox is made.
			h.w.state.sandboxRetry = h.w.state.sandboxRetry.Add(-sandboxBackoff)
			h.w.deps.runtimeClasses = fakeRuntimeClasses{"sandboxed": "runsc"}
			h.sync(pod, false)
			if got := h.sandboxHandlers(); len(got) != 1 || got[0] != "runsc" {
				t.Errorf("sandbox handlers after the back-off = %q, want [runsc]", got)
			}
		})
	}
}

// wantPendingInContainerCreating checks the last status: Pending, its two containers
// waiting in ContainerCreating (a sandbox that could not be made).
func (h *harness) wantPendingInContainerCreating(t *testing.T) {
	t.Helper()
	st := h.status.last
	if st.Phase != v1.PodPending || len(st.ContainerStatuses) != 2 {
		t.Fatalf("status %s with %d containers, want Pending with 2", st.Phase, len(st.ContainerStatuses))
	}
	for _, cs := range st.ContainerStatuses {
		if w := cs.State.Waiting; w == nil || w.Reason != status.ReasonContainerCreating {
			t.Errorf("container %s state %+v, want waiting in ContainerCreating", cs.Name, cs.State)
		}
	}
}
