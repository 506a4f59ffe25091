//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
)

// agentConditions are the conditions the kubelet writes on a running pod,
// each with the pod generation it reflects.
var agentConditions = []corev1.PodConditionType{
	corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled,
}

// observedGeneration accepts a pod whose status, and every condition the
// agent writes, reflect generation gen.
func observedGeneration(gen int64) func(*corev1.Pod) error {
	return func(p *corev1.Pod) error {
		if p.Status.ObservedGeneration != gen {
			return fmt.Errorf("status.observedGeneration %d, want %d", p.Status.ObservedGeneration, gen)
		}
		for _, typ := range agentConditions {
			if c := podCondition(p, typ); c == nil || c.ObservedGeneration != gen {
				return fmt.Errorf("condition %s = %+v, want observedGeneration %d", typ, c, gen)
			}
		}
		return nil
	}
}

// TestObservedGenerationFollowsSpecUpdate: a running pod's status reflects its
// generation, and a spec update the apiserver allows in place (setting
// activeDeadlineSeconds) shows in status.observedGeneration and the agent's
// conditions at its next write, without restarting anything.
func TestObservedGenerationFollowsSpecUpdate(t *testing.T) {
	t.Parallel()
	pod := createPod(t, busyboxPod("generation", corev1.RestartPolicyAlways, "exec sleep 3600"))
	running := waitPod(t, pod, 2*time.Minute, func(p *corev1.Pod) error {
		if err := runningAndReady(p); err != nil {
			return err
		}
		return observedGeneration(1)(p)
	})
	if running.Generation != 1 {
		t.Fatalf("generation %d of a new pod, want 1", running.Generation)
	}

	deadline := int64(36000)
	var updated *corev1.Pod
	framework.Eventually(t, 30*time.Second, func() error {
		cur, err := framework.Client(t).CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec.ActiveDeadlineSeconds = &deadline
		updated, err = framework.Client(t).CoreV1().Pods(pod.Namespace).Update(context.Background(), cur, metav1.UpdateOptions{})
		return err
	})
	if updated.Generation != 2 {
		t.Fatalf("generation %d after a spec update, want 2", updated.Generation)
	}

	got := waitPod(t, pod, time.Minute, observedGeneration(2))
	if err := runningAndReady(got); err != nil {
		t.Errorf("after the update: %v", err)
	}
	before, after := running.Status.ContainerStatuses[0], got.Status.ContainerStatuses[0]
	if after.RestartCount != 0 || after.ContainerID != before.ContainerID {
		t.Errorf("the container was restarted by the update: %s, was %s", after.ContainerID, before.ContainerID)
	}
}

// TestRejectedPodObservesGeneration: a pod bound straight to the node (no
// scheduler) asking for more cpu than the node has is refused with OutOfcpu,
// and the refusal is for its generation 1, as the kubelet writes it.
func TestRejectedPodObservesGeneration(t *testing.T) {
	t.Parallel()
	allocatable := getNode(t).Status.Allocatable.Cpu().MilliValue()
	pod := sleepPod("rejected-generation", corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: *resource.NewMilliQuantity(allocatable+1000, resource.DecimalSI),
	}})
	pod = createPod(t, boundPod(pod))
	got := waitPod(t, pod, time.Minute, phaseIs(corev1.PodFailed))
	if got.Status.Reason != "OutOfcpu" {
		t.Errorf("status reason %q message %q, want OutOfcpu", got.Status.Reason, got.Status.Message)
	}
	if got.Generation != 1 || got.Status.ObservedGeneration != 1 {
		t.Errorf("generation %d observedGeneration %d, want 1 and 1", got.Generation, got.Status.ObservedGeneration)
	}
	if got.Status.StartTime == nil {
		t.Error("no startTime: the kubelet stamps one on a refused pod too")
	}
}

// terminatedContainers reads kubelet_terminated_containers_total of the labels
// given from the agent's /metrics; zero while the series does not exist.
func terminatedContainers(t *testing.T, labels map[string]string) (float64, error) {
	t.Helper()
	out, err := framework.KubectlErr(t, nodeProxy("/metrics")...)
	if err != nil {
		return 0, err
	}
	m, err := samples(out)
	if err != nil {
		return 0, fmt.Errorf("parse /metrics: %w", err)
	}
	s, err := sampleOf(m, "kubelet_terminated_containers_total", labels)
	if err != nil {
		return 0, nil
	}
	return float64(s.Value), nil
}

// TestTerminatedContainersCounted: a container that exits 139 is counted in
// kubelet_terminated_containers_total by its type, exit code and reason.
func TestTerminatedContainersCounted(t *testing.T) {
	t.Parallel()
	labels := map[string]string{"container_type": "container", "exit_code": "139", "reason": "Error"}
	before, err := terminatedContainers(t, labels)
	if err != nil {
		t.Fatal(err)
	}
	pod := createPod(t, busyboxPod("exit139", corev1.RestartPolicyNever, "exit 139"))
	got := waitPod(t, pod, 2*time.Minute, phaseIs(corev1.PodFailed))
	if term := got.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 139 || term.Reason != "Error" {
		t.Fatalf("container %s, want terminated Error 139", describeStatuses(got.Status.ContainerStatuses))
	}
	framework.Eventually(t, 30*time.Second, func() error {
		after, err := terminatedContainers(t, labels)
		if err != nil {
			return err
		}
		if after < before+1 {
			return fmt.Errorf("kubelet_terminated_containers_total%v = %v, was %v before the pod", labels, after, before)
		}
		return nil
	})
}
