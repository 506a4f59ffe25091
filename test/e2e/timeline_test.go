//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/pkg/timeline"
	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// nodeDebug GETs the agent's /debug/pods/<ns>/<name>/<what> of the pod's
// node through the apiserver's node proxy, into v.
func nodeDebug(t *testing.T, pod *corev1.Pod, what string, v any) error {
	t.Helper()
	raw, err := framework.Client(t).CoreV1().RESTClient().Get().
		AbsPath("/api/v1/nodes", pod.Spec.NodeName, "proxy", "debug", "pods", pod.Namespace, pod.Name, what).
		DoRaw(framework.Context(t, 30*time.Second))
	if err != nil {
		return fmt.Errorf("GET %s of %s: %w (%s)", what, pod.Name, err, raw)
	}
	return json.Unmarshal(raw, v)
}

// buildPlugin builds kubectl-nodeagent from the repository into a
// temporary directory.
func buildPlugin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kubectl-nodeagent")
	cmd := exec.CommandContext(framework.Context(t, 5*time.Minute), "go", "build", "-o", bin, "./cmd/kubectl-nodeagent")
	cmd.Dir = framework.Cluster(t).RepoDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build kubectl-nodeagent: %v\n%s", err, out)
	}
	return bin
}

// runPlugin runs the plugin against the cluster.
func runPlugin(t *testing.T, bin string, args ...string) string {
	t.Helper()
	args = append(args, "--kubeconfig", framework.Cluster(t).Kubeconfig())
	out, err := exec.CommandContext(framework.Context(t, time.Minute), bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl-nodeagent %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestPodTimeline: a pod's start, step by step, from the agent through the
// node proxy, and drawn by the kubectl plugin.
func TestPodTimeline(t *testing.T) {
	t.Parallel()
	cs := framework.Client(t)
	ctx := framework.Context(t, 3*time.Minute)
	cm, err := cs.CoreV1().ConfigMaps(podNS).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "timeline-"}, Data: map[string]string{"greeting": "hello"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().ConfigMaps(podNS).Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
	})
	pod := busyboxPod("timeline", corev1.RestartPolicyAlways, "trap 'exit 0' TERM; sleep 3600 & wait")
	pod.Spec.InitContainers = []corev1.Container{{Name: "init", Image: harness.BusyboxImage, Command: []string{"cat", "/cfg/greeting"},
		VolumeMounts: []corev1.VolumeMount{{Name: "cfg", MountPath: "/cfg"}}}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}}}
	// The main container's image is pulled (from the local registry), the init
	// container's found present.
	pod.Spec.Containers[0].ImagePullPolicy = corev1.PullAlways
	pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 1,
		ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	pod = framework.RunReady(t, pod)

	want := []string{"admit", "podCgroup", "volumes", "sandbox", "createContainer:init", "startContainer:init",
		"pullImage:main", "createContainer:main", "startContainer:main", timeline.StepReady}
	var tl timeline.Timeline
	framework.Eventually(t, 30*time.Second, func() error {
		if err := nodeDebug(t, pod, "timeline", &tl); err != nil {
			return err
		}
		if tl.UID != pod.UID {
			return fmt.Errorf("timeline of uid %s, want %s", tl.UID, pod.UID)
		}
		last, lastStart := -1, time.Time{}
		for _, name := range want {
			i := firstStep(tl.Steps, name)
			if i < 0 {
				return fmt.Errorf("no step %s in %s", name, stepNames(tl.Steps))
			}
			s := tl.Steps[i]
			if i < last || s.Start.Before(lastStart) {
				return fmt.Errorf("step %s out of order in %s", name, stepNames(tl.Steps))
			}
			if s.Outcome != timeline.Done || s.DurationSeconds < 0 || s.End.Before(s.Start) {
				return fmt.Errorf("step %s: %s, %gs, %v to %v", name, s.Outcome, s.DurationSeconds, s.Start, s.End)
			}
			last, lastStart = i, s.Start
		}
		return nil
	})

	if pull := tl.Steps[firstStep(tl.Steps, "pullImage:main")]; pull.Cached {
		t.Errorf("pullImage:main %+v found the image present; the pod's policy is Always", pull)
	}
	// The steps account for the pod's start: one after the other (a pod's worker takes
	// them in turn), from admission to the first ready status, within the pod's measured
	// start — its creation to its Ready condition, both written in whole seconds.
	ready := tl.Steps[firstStep(tl.Steps, timeline.StepReady)]
	span := ready.End.Sub(tl.Steps[0].Start)
	var sum time.Duration
	for _, s := range tl.Steps {
		if !s.Start.After(ready.End) {
			sum += time.Duration(s.DurationSeconds * float64(time.Second))
		}
	}
	if sum > span+10*time.Millisecond {
		t.Errorf("the steps take %s in all, more than the %s from admission to ready: they overlap", sum, span)
	}
	var readyAt time.Time
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			readyAt = c.LastTransitionTime.Time
		}
	}
	if measured := readyAt.Sub(pod.CreationTimestamp.Time); readyAt.IsZero() || span > measured+time.Second || span < measured-3*time.Second {
		t.Errorf("the timeline spans %s from admission to ready; the pod's measured start (creation %s to Ready %s) is %s",
			span, pod.CreationTimestamp.Time, readyAt, measured)
	}

	var why timeline.Why
	if err := nodeDebug(t, pod, "why", &why); err != nil {
		t.Fatal(err)
	}
	if !why.RunningAndReady {
		t.Errorf("why of a ready pod: %+v", why)
	}

	bin := buildPlugin(t)
	out := runPlugin(t, bin, "timeline", pod.Name, "-n", pod.Namespace)
	for _, name := range want {
		if !strings.Contains(out, name) {
			t.Errorf("the waterfall lacks %s:\n%s", name, out)
		}
	}
	page := filepath.Join(t.TempDir(), "timeline.html")
	runPlugin(t, bin, "timeline", pod.Name, "-n", pod.Namespace, "--html", page)
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(html), "<td>startContainer:main</td>") {
		t.Errorf("the HTML waterfall lacks the steps:\n%s", html)
	}
	// The page as people see it: drawn by a browser, its bars in colour.
	framework.Screenshot(t, page)
}

// TestPodWhyImagePull: for a pod whose image does not exist, why names
// the pull step and the registry's error, as the events tell it.
func TestPodWhyImagePull(t *testing.T) {
	t.Parallel()
	image := harness.RegistryAddr + "/nodeagent/never-existed-timeline:1"
	pod := createPod(t, imagePod("why", image, corev1.PullIfNotPresent))
	pod = waitingReasons(t, pod, 2*time.Minute, "ErrImagePull")

	var why timeline.Why
	framework.Eventually(t, time.Minute, func() error {
		if err := nodeDebug(t, pod, "why", &why); err != nil {
			return err
		}
		if why.Step != "pullImage:main" || why.Error == "" || why.RunningAndReady {
			return fmt.Errorf("why = %+v, want the failed pull of main with its error", why)
		}
		return nil
	})
	if !strings.Contains(why.Error, "never-existed-timeline") {
		t.Errorf("error %q does not name the image", why.Error)
	}
	if ev := podEvents(t, pod); !hasEvent(ev, "Failed", why.Error) {
		t.Errorf("error %q is not the one the Failed event gives:\n%s", why.Error, eventSummary(ev))
	}
	if why.Since.IsZero() || why.ForSeconds < 0 {
		t.Errorf("since %v for %gs", why.Since, why.ForSeconds)
	}

	out := runPlugin(t, buildPlugin(t), "why", pod.Name, "-n", pod.Namespace)
	if !strings.Contains(out, "pullImage:main") || !strings.Contains(out, why.Error) {
		t.Errorf("kubectl nodeagent why:\n%s\nwant the step and %q", out, why.Error)
	}
}

func firstStep(steps []timeline.Step, name string) int {
	for i, s := range steps {
		if s.Name == name {
			return i
		}
	}
	return -1
}

func stepNames(steps []timeline.Step) string {
	var out []string
	for _, s := range steps {
		out = append(out, s.Name)
	}
	return "[" + strings.Join(out, " ") + "]"
}

// TestPodWhyMissingConfigMap: for a pod whose configMap volume names a configMap that does
// not exist, "why" names the volumes step, the error as the FailedMount event gives it, and
// how long it has been failing.
func TestPodWhyMissingConfigMap(t *testing.T) {
	t.Parallel()
	pod := busyboxPod("why-configmap", corev1.RestartPolicyAlways, "sleep 3600")
	pod.Spec.Volumes = []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "never-existed-timeline"}}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "config", MountPath: "/config"}}
	pod = waitPod(t, createPod(t, pod), time.Minute, func(p *corev1.Pod) error {
		if p.Spec.NodeName == "" {
			return fmt.Errorf("not scheduled yet")
		}
		return nil
	})

	var why timeline.Why
	framework.Eventually(t, 2*time.Minute, func() error {
		if err := nodeDebug(t, pod, "why", &why); err != nil {
			return err
		}
		if !strings.HasPrefix(why.Step, "volumes") || why.Error == "" || why.RunningAndReady {
			return fmt.Errorf("why = %+v, want the failed volume set-up with its error", why)
		}
		return nil
	})
	if !strings.Contains(why.Error, `configmap "never-existed-timeline" not found`) {
		t.Errorf("error %q does not say the configMap is not found", why.Error)
	}
	framework.Eventually(t, time.Minute, func() error {
		if ev := podEvents(t, pod); !hasEvent(ev, "FailedMount", `configmap "never-existed-timeline" not found`) {
			return fmt.Errorf("no FailedMount event naming the configMap:\n%s", eventSummary(ev))
		}
		return nil
	})
	if why.Since.IsZero() || why.ForSeconds < 0 {
		t.Errorf("since %v for %gs", why.Since, why.ForSeconds)
	}
}
