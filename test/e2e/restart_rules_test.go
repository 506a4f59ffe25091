//go:build e2e

package e2e

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// TestContainerRestartRules: a container's restartPolicyRules override
// the pod's restartPolicy Never. The first run of the script exits 42,
// which the rule restarts; the second finds its marker in the emptyDir
// and succeeds, and the pod with it. An exit code no rule names falls to
// the container's own policy, Never: no restart, and the pod fails.
func TestContainerRestartRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		script   string
		phase    corev1.PodPhase
		restarts int32
		exit     int32
		// lastExit is the exit code of the run before the last, when
		// there was one.
		lastExit *int32
	}{
		{name: "exit 42 restarts once", script: "if [ -f /d/x ]; then exit 0; else touch /d/x; exit 42; fi",
			phase: corev1.PodSucceeded, restarts: 1, exit: 0, lastExit: ptr.To[int32](42)},
		{name: "exit 1 does not restart", script: "exit 1",
			phase: corev1.PodFailed, restarts: 0, exit: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pod := busyboxPod("restart-rules", corev1.RestartPolicyNever, tc.script)
			never := corev1.ContainerRestartPolicyNever
			c := &pod.Spec.Containers[0]
			c.RestartPolicy = &never
			c.RestartPolicyRules = []corev1.ContainerRestartRule{{
				Action: corev1.ContainerRestartRuleActionRestart,
				ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{
					Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42},
				},
			}}
			c.VolumeMounts = []corev1.VolumeMount{{Name: "d", MountPath: "/d"}}
			pod.Spec.Volumes = []corev1.Volume{{Name: "d", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
			pod = createPod(t, pod)

			got := waitPod(t, pod, 3*time.Minute, func(p *corev1.Pod) error {
				if err := phaseIs(tc.phase)(p); err != nil {
					return err
				}
				if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Terminated == nil {
					return fmt.Errorf("not terminated yet: %s", describeStatuses(p.Status.ContainerStatuses))
				}
				return nil
			})
			cs := got.Status.ContainerStatuses[0]
			if cs.RestartCount != tc.restarts {
				t.Errorf("restartCount %d, want %d: %s", cs.RestartCount, tc.restarts, describeStatuses(got.Status.ContainerStatuses))
			}
			if cs.State.Terminated.ExitCode != tc.exit {
				t.Errorf("exit code %d, want %d", cs.State.Terminated.ExitCode, tc.exit)
			}
			last := cs.LastTerminationState.Terminated
			switch {
			case tc.lastExit == nil && last != nil:
				t.Errorf("lastState %+v, want none: never restarted", last)
			case tc.lastExit != nil && (last == nil || last.ExitCode != *tc.lastExit):
				t.Errorf("lastState %+v, want terminated with exit %d", last, *tc.lastExit)
			}
		})
	}
}
