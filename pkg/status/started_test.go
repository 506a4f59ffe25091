package status

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// The kubelet writes started on every init and app container status,
// false until the container runs and has passed its startup probe, and
// never on an ephemeral one; ready is true only for a running, started
// container that passes its readiness probe, and for an init container
// (not a sidecar) that exited 0.
func TestComputeStartedAndReady(t *testing.T) {
	asInit := func(c *runtime.ContainerStatus) *runtime.ContainerStatus { c.Init = true; return c }
	tests := []struct {
		name string
		in   Input
		// want is each container's "started/ready", by name; started is
		// "nil" when the status must leave it out.
		want map[string]string
	}{
		{name: "nothing created yet", in: Input{Pod: withDebugger(pod(v1.RestartPolicyAlways, "i")), Observed: observed()},
			want: map[string]string{"i": "false/false", "c": "false/false", "debugger": "nil/false"}},
		{name: "created, not running", in: Input{Pod: pod(v1.RestartPolicyAlways), Observed: observed(ctr("c", runtime.ContainerCreated, 0))},
			want: map[string]string{"c": "false/false"}},
		{name: "running", in: Input{Pod: withDebugger(pod(v1.RestartPolicyAlways)),
			Observed: observed(ctr("c", runtime.ContainerRunning, 0), debugger(runtime.ContainerRunning, 0))},
			want: map[string]string{"c": "true/true", "debugger": "nil/false"}},
		{name: "running, startup probe pending", in: Input{Pod: withProbes(pod(v1.RestartPolicyAlways), false, true),
			Observed: observed(ctr("c", runtime.ContainerRunning, 0))},
			want: map[string]string{"c": "false/false"}},
		{name: "crash loop back-off", in: Input{Pod: pod(v1.RestartPolicyAlways), Observed: observed(ctr("c", runtime.ContainerExited, 1)),
			Waiting: map[string]Waiting{"c": {Reason: "CrashLoopBackOff"}}},
			want: map[string]string{"c": "false/false"}},
		{name: "init container done, app container waiting for its image", in: Input{Pod: pod(v1.RestartPolicyAlways, "i"),
			Observed: observed(asInit(ctr("i", runtime.ContainerExited, 0))), Waiting: map[string]Waiting{"c": {Reason: "ErrImagePull"}}},
			want: map[string]string{"i": "false/true", "c": "false/false"}},
		{name: "sidecar exited 0: not ready", in: Input{Pod: withSidecar(pod(v1.RestartPolicyAlways), "s"),
			Observed: observed(asInit(ctr("s", runtime.ContainerExited, 0)))},
			want: map[string]string{"s": "false/false", "c": "false/false"}},
		{name: "sidecar running", in: Input{Pod: withSidecar(pod(v1.RestartPolicyAlways), "s"),
			Observed: observed(asInit(ctr("s", runtime.ContainerRunning, 0)))},
			want: map[string]string{"s": "true/true", "c": "false/false"}},
		{name: "ended pod", in: Input{Pod: pod(v1.RestartPolicyNever), Observed: observed(ctr("c", runtime.ContainerExited, 0)), Terminal: true},
			want: map[string]string{"c": "false/false"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Now = t0
			st := Compute(tc.in)
			got := map[string]string{}
			for _, list := range [][]v1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses, st.EphemeralContainerStatuses} {
				for _, cs := range list {
					started := "nil"
					if cs.Started != nil {
						started = fmt.Sprint(*cs.Started)
					}
					got[cs.Name] = fmt.Sprintf("%s/%t", started, cs.Ready)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("started/ready = %v, want %v", got, tc.want)
			}
		})
	}
}
