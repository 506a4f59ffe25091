//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
)

// TestContainerGCKeepsOneDeadContainer: the dead attempts of a crash-looping container are
// removed by the container GC (every minute) down to the newest and one dead one, the
// kubelet's MaxPerPodContainer 1; waiting out a back-off the newest is the only one left,
// and the pod's status still shows its restart count and last termination. Once the pod is
// deleted, the runtime keeps nothing of it and its /var/log/pods directory is gone. The
// upstream kubelet behaves the same (there, the last of it goes at its next GC pass).
func TestContainerGCKeepsOneDeadContainer(t *testing.T) {
	t.Parallel()
	pod := createPod(t, busyboxPod("gc", corev1.RestartPolicyAlways, "exit 1"))
	uid := string(pod.UID)
	// Attempts 0 and 1 back to back, then 10 s and 20 s of back-off.
	var restarts int32
	waitPod(t, pod, 3*time.Minute, func(p *corev1.Pod) error {
		if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].RestartCount < 3 {
			return fmt.Errorf("containers %s", describeStatuses(p.Status.ContainerStatuses))
		}
		restarts = p.Status.ContainerStatuses[0].RestartCount
		return nil
	})

	// One GC period and slack: the newest attempt and at most one dead one.
	framework.Eventually(t, 90*time.Second, func() error {
		if cs := containersNamed(t, uid, "main"); len(cs) > 2 {
			return fmt.Errorf("%d containers of main: %s", len(cs), describeContainers(cs))
		}
		return nil
	})

	// The back-offs are 40 s, then 80 s: a GC pass falls in the second one at the latest,
	// and leaves the newest attempt alone, dead. The status is still read from it.
	framework.Eventually(t, 150*time.Second, func() error {
		cs := containersNamed(t, uid, "main")
		if len(cs) != 1 || cs[0].State != runtimeapi.ContainerState_CONTAINER_EXITED {
			return fmt.Errorf("%d containers of main: %s, want the newest alone, exited", len(cs), describeContainers(cs))
		}
		kept := cs[0]
		p, err := framework.Client(t).CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(p.Status.ContainerStatuses) != 1 {
			return fmt.Errorf("container statuses %s", describeStatuses(p.Status.ContainerStatuses))
		}
		st := p.Status.ContainerStatuses[0]
		if !strings.HasSuffix(st.ContainerID, "://"+kept.Id) {
			return fmt.Errorf("status names container %s, the runtime keeps %s", st.ContainerID, kept.Id)
		}
		if st.RestartCount < restarts || strconv.Itoa(int(st.RestartCount)) != kept.Annotations["io.kubernetes.container.restartCount"] {
			return fmt.Errorf("restartCount %d (seen %d before), the kept container's annotation says %s",
				st.RestartCount, restarts, kept.Annotations["io.kubernetes.container.restartCount"])
		}
		if lt := st.LastTerminationState.Terminated; lt == nil || lt.ExitCode != 1 {
			return fmt.Errorf("lastState %+v, want terminated with exit code 1; %s", st.LastTerminationState, describeStatuses(p.Status.ContainerStatuses))
		}
		return nil
	})

	deletePodAndWait(t, pod)
	logDir := filepath.Join("/var/log/pods", fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
	framework.Eventually(t, 90*time.Second, func() error {
		if cs := containersOfPod(t, uid); len(cs) > 0 {
			return fmt.Errorf("containers of the deleted pod left: %s", describeContainers(cs))
		}
		if sbs := sandboxesOf(t, uid); len(sbs) > 0 {
			return fmt.Errorf("%d sandboxes of the deleted pod left", len(sbs))
		}
		if _, err := os.Stat(logDir); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("log directory %s of the deleted pod: %v", logDir, err)
		}
		return nil
	})
}

// containersOfPod lists the runtime's containers of a pod, by the kubelet's pod UID label.
func containersOfPod(t *testing.T, uid string) []*runtimeapi.Container {
	t.Helper()
	rt, _ := framework.CRI(t)
	resp, err := rt.ListContainers(framework.Context(t, 30*time.Second), &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}},
	})
	if err != nil {
		t.Fatalf("list containers: %v", err)
	}
	return resp.Containers
}

func describeContainers(cs []*runtimeapi.Container) string {
	var out []string
	for _, c := range cs {
		id := c.Id
		if len(id) > 12 {
			id = id[:12]
		}
		out = append(out, fmt.Sprintf("%s %s restart %s", id, c.State, c.Annotations["io.kubernetes.container.restartCount"]))
	}
	return "[" + strings.Join(out, "; ") + "]"
}
