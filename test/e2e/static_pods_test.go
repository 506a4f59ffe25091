//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// staticPodWait bounds every wait on a static pod: the agent reads the directory every
// fileCheckFrequency (20s by default, the harness keeps it), then starts the pod.
const staticPodWait = 2 * time.Minute

// staticManifest is a busybox pod in ns that runs script.
func staticManifest(ns, name, script string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
  labels: {test: static}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: %s
    command: [sh, -c, %q]
`, name, ns, harness.BusyboxImage, script)
}

// writeStaticPod puts a manifest in the agent's staticPodPath (written aside, then
// renamed, so that the agent never reads half a file) and removes it when the test ends.
func writeStaticPod(t *testing.T, file, content string) string {
	t.Helper()
	dir := framework.Cluster(t).StaticPodDir()
	path := filepath.Join(dir, file)
	tmp := filepath.Join(dir, "."+file+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(path) })
	return path
}

// mirrorOf reads the mirror pod of static pod name (suffixed with the node's name).
func mirrorOf(t *testing.T, ns, name string) (*corev1.Pod, error) {
	return framework.Client(t).CoreV1().Pods(ns).Get(context.Background(), name+"-"+harness.NodeName, metav1.GetOptions{})
}

// waitMirror waits until the mirror pod passes check and returns it.
func waitMirror(t *testing.T, ns, name string, check func(*corev1.Pod) error) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	framework.Eventually(t, staticPodWait, func() error {
		p, err := mirrorOf(t, ns, name)
		if err != nil {
			return err
		}
		got = p
		return check(p)
	})
	return got
}

// isMirror checks what the kubelet puts on a mirror pod: its static pod's hash (which is
// the static pod's UID) under config.mirror, the file source, and the Node as its owner.
func isMirror(node *corev1.Node) func(*corev1.Pod) error {
	return func(p *corev1.Pod) error {
		hash := p.Annotations["kubernetes.io/config.hash"]
		if hash == "" || p.Annotations["kubernetes.io/config.mirror"] != hash {
			return fmt.Errorf("annotations %v: want config.mirror equal to config.hash", p.Annotations)
		}
		if p.Annotations["kubernetes.io/config.source"] != "file" {
			return fmt.Errorf("config.source = %q", p.Annotations["kubernetes.io/config.source"])
		}
		if _, err := time.Parse(time.RFC3339Nano, p.Annotations["kubernetes.io/config.seen"]); err != nil {
			return fmt.Errorf("config.seen: %v", err)
		}
		if len(p.OwnerReferences) != 1 {
			return fmt.Errorf("owner references %+v", p.OwnerReferences)
		}
		o := p.OwnerReferences[0]
		if o.APIVersion != "v1" || o.Kind != "Node" || o.Name != node.Name || o.UID != node.UID || o.Controller == nil || !*o.Controller {
			return fmt.Errorf("owner %+v, want the controlling Node %s/%s", o, node.Name, node.UID)
		}
		if p.Spec.NodeName != node.Name {
			return fmt.Errorf("nodeName %q", p.Spec.NodeName)
		}
		return nil
	}
}

func both(checks ...func(*corev1.Pod) error) func(*corev1.Pod) error {
	return func(p *corev1.Pod) error {
		for _, c := range checks {
			if err := c(p); err != nil {
				return err
			}
		}
		return nil
	}
}

// runningSandboxes are the ready sandboxes the runtime holds for a pod UID.
func runningSandboxes(t *testing.T, uid string) []*runtimeapi.PodSandbox {
	var out []*runtimeapi.PodSandbox
	for _, sb := range sandboxesOf(t, uid) {
		if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			out = append(out, sb)
		}
	}
	return out
}

// TestStaticPodRunsAndIsMirrored walks one static pod through its life: the file makes it
// run and mirrored; a deleted mirror pod comes back without the pod restarting; an edited
// file replaces the pod (new UID, new container, new mirror); a removed file stops it and
// removes its mirror.
func TestStaticPodRunsAndIsMirrored(t *testing.T) {
	t.Parallel()
	cs := framework.Client(t)
	ctx := framework.Context(t, 10*time.Minute)
	ns := newNamespace(t, "static")
	node := getNode(t)
	path := writeStaticPod(t, ns+"-web.yaml", staticManifest(ns, "web", "echo one; sleep 3600"))

	first := waitMirror(t, ns, "web", both(isMirror(node), runningAndReady))
	uid := first.Annotations["kubernetes.io/config.hash"]
	if first.UID == "" || string(first.UID) == uid {
		t.Errorf("the mirror pod's UID %q must be the apiserver's own, not the static pod's %q", first.UID, uid)
	}
	if sbs := runningSandboxes(t, uid); len(sbs) != 1 || sbs[0].Metadata.Name != first.Name || sbs[0].Metadata.Namespace != ns {
		t.Fatalf("running sandboxes of the static pod %s: %v", uid, sbs)
	}
	containerID := first.Status.ContainerStatuses[0].ContainerID

	// A deleted mirror pod is made again; the static pod itself goes on untouched.
	if err := cs.CoreV1().Pods(ns).Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := waitMirror(t, ns, "web", func(p *corev1.Pod) error {
		if p.UID == first.UID {
			return fmt.Errorf("still the first mirror pod (deleting since %v)", p.DeletionTimestamp)
		}
		if p.DeletionTimestamp != nil {
			return fmt.Errorf("being deleted")
		}
		return both(isMirror(node), runningAndReady)(p)
	})
	if again.Annotations["kubernetes.io/config.mirror"] != uid {
		t.Errorf("the new mirror pod has hash %q, want %q", again.Annotations["kubernetes.io/config.mirror"], uid)
	}
	if got := again.Status.ContainerStatuses[0]; got.ContainerID != containerID || got.RestartCount != 0 {
		t.Errorf("the static pod's container changed with its mirror: %s (restarts %d), was %s", got.ContainerID, got.RestartCount, containerID)
	}

	// An edited file is a new pod: new UID, new container, new mirror; the old one stops.
	writeStaticPod(t, ns+"-web.yaml", staticManifest(ns, "web", "echo two; sleep 3600"))
	edited := waitMirror(t, ns, "web", both(isMirror(node), runningAndReady, func(p *corev1.Pod) error {
		if p.Annotations["kubernetes.io/config.mirror"] == uid {
			return fmt.Errorf("still the mirror of the first version")
		}
		return nil
	}))
	newUID := edited.Annotations["kubernetes.io/config.hash"]
	if got := edited.Spec.Containers[0].Command; !strings.Contains(strings.Join(got, " "), "echo two") {
		t.Errorf("the mirror pod's spec is not the edited one: %v", got)
	}
	if edited.Status.ContainerStatuses[0].ContainerID == containerID {
		t.Error("the edited pod runs the old container")
	}
	framework.Eventually(t, staticPodWait, func() error {
		if sbs := runningSandboxes(t, uid); len(sbs) != 0 {
			return fmt.Errorf("the first version still runs: %v", sbs)
		}
		if sbs := runningSandboxes(t, newUID); len(sbs) != 1 {
			return fmt.Errorf("the edited version runs %d sandboxes", len(sbs))
		}
		return nil
	})
	if logs := framework.Kubectl(t, "logs", "-n", ns, edited.Name); !strings.Contains(logs, "two") {
		t.Errorf("logs of the edited pod: %q", logs)
	}

	// A removed file stops the pod and removes its mirror.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, staticPodWait, func() error {
		if p, err := mirrorOf(t, ns, "web"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("mirror pod still there (%v): %v", err, p.Annotations)
		}
		if sbs := runningSandboxes(t, newUID); len(sbs) != 0 {
			return fmt.Errorf("still running: %v", sbs)
		}
		return nil
	})
}

// TestStaticPodMalformedFile: a file that is not a pod gets a Warning event on the Node
// naming the file, and the static pods beside it go on untouched.
func TestStaticPodMalformedFile(t *testing.T) {
	t.Parallel()
	requireNodeagent(t) // the kubelet only logs a malformed manifest
	cs := framework.Client(t)
	ctx := framework.Context(t, 5*time.Minute)
	ns := newNamespace(t, "static-bad")
	node := getNode(t)
	writeStaticPod(t, ns+"-good.yaml", staticManifest(ns, "good", "sleep 3600"))
	good := waitMirror(t, ns, "good", both(isMirror(node), runningAndReady))
	containerID := good.Status.ContainerStatuses[0].ContainerID

	bad := writeStaticPod(t, ns+"-bad.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: bad\nspec: [\n")
	framework.Eventually(t, staticPodWait, func() error {
		events, err := cs.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + harness.NodeName + ",reason=FailedValidation",
		})
		if err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, bad) {
				return nil
			}
		}
		return fmt.Errorf("no FailedValidation event on the Node naming %s among %d", bad, len(events.Items))
	})
	if _, err := mirrorOf(t, ns, "bad"); !apierrors.IsNotFound(err) {
		t.Errorf("a mirror pod for the malformed file: %v", err)
	}
	// A pod written after the bad file runs too, so the agent has read the directory with
	// the bad file in it and acted on it; the good pod's container still runs, never restarted.
	writeStaticPod(t, ns+"-witness.yaml", staticManifest(ns, "witness", "sleep 3600"))
	waitMirror(t, ns, "witness", both(isMirror(node), runningAndReady))
	p, err := mirrorOf(t, ns, "good")
	if err != nil {
		t.Fatalf("the good pod's mirror is gone: %v", err)
	}
	if p.UID != good.UID {
		t.Error("the good pod's mirror was replaced")
	}
	if cs := p.Status.ContainerStatuses[0]; cs.ContainerID != containerID || cs.RestartCount != 0 {
		t.Errorf("the good pod's container changed: %s restarts %d", cs.ContainerID, cs.RestartCount)
	}
	rt, _ := framework.CRI(t)
	id := strings.TrimPrefix(containerID, "containerd://")
	st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("the good pod's container %s: %v %v", id, st.GetStatus().GetState(), err)
	}
}
