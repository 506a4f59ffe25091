//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// podExec runs a command in a pod's container through kubectl exec and returns its output.
func podExec(t *testing.T, pod *corev1.Pod, container string, cmd ...string) (string, error) {
	t.Helper()
	args := append([]string{"exec", "-n", pod.Namespace, pod.Name, "-c", container, "--"}, cmd...)
	return framework.KubectlErr(t, args...)
}

// mustExec is podExec that fails the test on error.
func mustExec(t *testing.T, pod *corev1.Pod, container string, cmd ...string) string {
	t.Helper()
	out, err := podExec(t, pod, container, cmd...)
	if err != nil {
		t.Fatalf("exec %v in %s: %v\n%s", cmd, pod.Name, err, out)
	}
	return out
}

// sleeper is a busybox container that waits to be exec'd into.
func sleeper(name string, mounts ...corev1.VolumeMount) corev1.Container {
	return corev1.Container{
		Name: name, Image: harness.BusyboxImage, VolumeMounts: mounts,
		Command: []string{"sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"},
	}
}

// agentRootDir is the agent's --root-dir in the harness.
func agentRootDir(t *testing.T) string {
	return filepath.Join(framework.Cluster(t).RunDir, "agent", "root")
}

// TestVolumeKindsReachTheContainer: every node-local kind in one pod, as the process sees it.
func TestVolumeKindsReachTheContainer(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	cs := framework.Client(t)
	ctx := framework.Context(t, 4*time.Minute)

	cm, err := cs.CoreV1().ConfigMaps(podNS).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "vol-cm-"},
		Data:       map[string]string{"greeting": "hello", "other": "x"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().ConfigMaps(podNS).Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
	})
	sec, err := cs.CoreV1().Secrets(podNS).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "vol-secret-"},
		Data:       map[string][]byte{"password": []byte("s3cret")},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Secrets(podNS).Delete(context.Background(), sec.Name, metav1.DeleteOptions{}) })

	hostDir := filepath.Join(framework.Cluster(t).RunDir, "e2e-hostpath", fmt.Sprint(time.Now().UnixNano()))
	t.Cleanup(func() { _ = os.RemoveAll(hostDir) })
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	mode0400, mode0640 := int32(0o400), int32(0o640)
	fsGroup := int64(2345)
	size := resource.MustParse("64Mi")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "vol-kinds-", Namespace: podNS, Labels: map[string]string{"tier": "one"}},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{FSGroup: &fsGroup},
			Containers: []corev1.Container{sleeper("main",
				corev1.VolumeMount{Name: "scratch", MountPath: "/scratch"},
				corev1.VolumeMount{Name: "mem", MountPath: "/mem"},
				corev1.VolumeMount{Name: "host", MountPath: "/host"},
				corev1.VolumeMount{Name: "cm", MountPath: "/cm"},
				corev1.VolumeMount{Name: "secret", MountPath: "/secret"},
				corev1.VolumeMount{Name: "labels", MountPath: "/podinfo"},
				corev1.VolumeMount{Name: "scratch", MountPath: "/ro-scratch", ReadOnly: true},
			)},
			Volumes: []corev1.Volume{
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &size}}},
				{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostDir, Type: &dirOrCreate}}},
				{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name},
					Items:                []corev1.KeyToPath{{Key: "greeting", Path: "sub/greeting.txt", Mode: &mode0400}},
				}}},
				{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: sec.Name, DefaultMode: &mode0640}}},
				{Name: "labels", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
					Items: []corev1.DownwardAPIVolumeFile{{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}},
				}}},
			},
		},
	}
	pod = createPod(t, pod)
	pod = waitPod(t, pod, 2*time.Minute, runningAndReady)

	check := func(what, got, want string) {
		t.Helper()
		if strings.TrimSpace(got) != want {
			t.Errorf("%s = %q, want %q", what, strings.TrimSpace(got), want)
		}
	}
	// emptyDir on disk: writable, shared between mount points, group-owned by fsGroup.
	mustExec(t, pod, "main", "sh", "-c", "echo data > /scratch/f")
	check("emptyDir read back through its read-only mount", mustExec(t, pod, "main", "cat", "/ro-scratch/f"), "data")
	if out, err := podExec(t, pod, "main", "sh", "-c", "echo x > /ro-scratch/g"); err == nil || !strings.Contains(out+err.Error(), "Read-only file system") {
		t.Errorf("write to a readOnly volumeMount: %v %q, want Read-only file system", err, out)
	}
	check("emptyDir group", mustExec(t, pod, "main", "stat", "-c", "%g", "/scratch"), "2345")
	// emptyDir medium Memory: tmpfs of the size asked for.
	check("memory emptyDir mount", mustExec(t, pod, "main", "sh", "-c", "grep ' /mem ' /proc/mounts | cut -d' ' -f3"), "tmpfs")
	check("memory emptyDir size (1K blocks)", mustExec(t, pod, "main", "sh", "-c", "df -k /mem | tail -1 | awk '{print $2}'"), "65536")
	// hostPath DirectoryOrCreate: created on the host, and what the pod writes is there.
	mustExec(t, pod, "main", "sh", "-c", "echo from-pod > /host/out")
	if b, err := os.ReadFile(filepath.Join(hostDir, "out")); err != nil || string(b) != "from-pod\n" {
		t.Errorf("hostPath file on the host: %q %v", b, err)
	}
	// configMap item with its own mode; the volume is read-only to the container.
	check("configMap item", mustExec(t, pod, "main", "cat", "/cm/sub/greeting.txt"), "hello")
	// 0400 widened by fsGroup to group-readable, as the kubelet sets ownership (0440 for read-only volumes).
	check("configMap item mode", mustExec(t, pod, "main", "stat", "-L", "-c", "%a %g", "/cm/sub/greeting.txt"), "440 2345")
	if out, err := podExec(t, pod, "main", "ls", "/cm/other"); err == nil {
		t.Errorf("configMap key not listed in items was projected: %q", out)
	}
	if out, err := podExec(t, pod, "main", "sh", "-c", "echo x > /cm/new"); err == nil || !strings.Contains(out+err.Error(), "Read-only file system") {
		t.Errorf("write into a configMap volume: %v %q, want Read-only file system", err, out)
	}
	// secret with defaultMode, group-owned by fsGroup.
	check("secret", mustExec(t, pod, "main", "cat", "/secret/password"), "s3cret")
	check("secret mode and group", mustExec(t, pod, "main", "stat", "-L", "-c", "%a %g", "/secret/password"), "640 2345")
	// downwardAPI labels, and a label change reaching the file.
	check("downwardAPI labels", mustExec(t, pod, "main", "cat", "/podinfo/labels"), `tier="one"`)
	patch := []byte(`{"metadata":{"labels":{"tier":"two"}}}`)
	if _, err := cs.CoreV1().Pods(podNS).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, func() error {
		if got := strings.TrimSpace(mustExec(t, pod, "main", "cat", "/podinfo/labels")); got != `tier="two"` {
			return fmt.Errorf("labels file = %q after the label change", got)
		}
		return nil
	})
	// The service-account token the admission plugin added: projected token, CA bundle and namespace.
	token := mustExec(t, pod, "main", "cat", "/var/run/secrets/kubernetes.io/serviceaccount/token")
	check("namespace file", mustExec(t, pod, "main", "cat", "/var/run/secrets/kubernetes.io/serviceaccount/namespace"), podNS)
	if ca := mustExec(t, pod, "main", "cat", "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"); !strings.Contains(ca, "BEGIN CERTIFICATE") {
		t.Errorf("ca.crt = %.80q, want a certificate", ca)
	}
	review, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !review.Status.Authenticated || review.Status.User.Username != "system:serviceaccount:"+podNS+":default" {
		t.Errorf("TokenReview of the pod's token: authenticated=%v user=%q error=%q", review.Status.Authenticated, review.Status.User.Username, review.Status.Error)
	}
	if got := review.Status.User.Extra["authentication.kubernetes.io/pod-name"]; len(got) != 1 || got[0] != pod.Name {
		t.Errorf("token bound to pod %v, want %s", got, pod.Name)
	}
}

// TestConfigMapUpdateReachesRunningPod: a changed configMap is rewritten in place, atomically.
func TestConfigMapUpdateReachesRunningPod(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	cs := framework.Client(t)
	ctx := framework.Context(t, 4*time.Minute)
	cm, err := cs.CoreV1().ConfigMaps(podNS).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "vol-update-"},
		Data:       map[string]string{"k": "v1"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().ConfigMaps(podNS).Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
	})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "vol-update-", Namespace: podNS},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{sleeper("main", corev1.VolumeMount{Name: "cm", MountPath: "/cm"})},
			Volumes: []corev1.Volume{{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}}},
		},
	}
	pod = waitPod(t, createPod(t, pod), 2*time.Minute, runningAndReady)
	if got := mustExec(t, pod, "main", "cat", "/cm/k"); got != "v1" {
		t.Fatalf("/cm/k = %q, want v1", got)
	}
	cm.Data["k"] = "v2"
	if _, err := cs.CoreV1().ConfigMaps(podNS).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The kubelet's syncFrequency is one minute; the update lands within it.
	framework.Eventually(t, 150*time.Second, func() error {
		if got := mustExec(t, pod, "main", "cat", "/cm/k"); got != "v2" {
			return fmt.Errorf("/cm/k = %q, want v2", got)
		}
		return nil
	})
	if link := strings.TrimSpace(mustExec(t, pod, "main", "readlink", "/cm/k")); link != "..data/k" {
		t.Errorf("/cm/k links to %q, want ..data/k (the atomic writer's layout)", link)
	}
}

// TestMissingConfigMapHoldsPodUntilCreated: FailedMount, no sandbox, then Running once it exists.
func TestMissingConfigMapHoldsPodUntilCreated(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	cs := framework.Client(t)
	ctx := framework.Context(t, 4*time.Minute)
	name := fmt.Sprintf("vol-missing-%d", time.Now().UnixNano())
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "vol-missing-", Namespace: podNS},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{sleeper("main", corev1.VolumeMount{Name: "cm", MountPath: "/cm"})},
			Volumes: []corev1.Volume{{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}},
		},
	}
	pod = createPod(t, pod)
	framework.Eventually(t, time.Minute, func() error {
		if ev := podEvents(t, pod); !hasEvent(ev, "FailedMount", fmt.Sprintf(`MountVolume.SetUp failed for volume "cm" : configmap "%s" not found`, name)) {
			return fmt.Errorf("no FailedMount event naming the configMap; events:\n%s", eventSummary(ev))
		}
		return nil
	})
	// The event and the status are written apart: the status may come a moment later.
	waitPod(t, pod, 10*time.Second, func(p *corev1.Pod) error {
		if err := phaseIs(corev1.PodPending)(p); err != nil {
			return err
		}
		if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Waiting == nil || p.Status.ContainerStatuses[0].State.Waiting.Reason != "ContainerCreating" {
			return fmt.Errorf("container status while the volume is missing: %s, want waiting ContainerCreating", describeStatuses(p.Status.ContainerStatuses))
		}
		return nil
	})
	if sb := sandboxesOf(t, string(pod.UID)); len(sb) != 0 {
		t.Errorf("a sandbox was created before the pod's volumes were set up: %d", len(sb))
	}
	if _, err := cs.CoreV1().ConfigMaps(podNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": "here"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().ConfigMaps(podNS).Delete(context.Background(), name, metav1.DeleteOptions{}) })
	pod = waitPod(t, pod, 3*time.Minute, runningAndReady)
	if got := mustExec(t, pod, "main", "cat", "/cm/k"); got != "here" {
		t.Errorf("/cm/k = %q, want here", got)
	}
}

// TestSubPathMounts: subPath and subPathExpr bind a part of the volume; a symlink planted by an
// init container to escape the volume fails the container instead of exposing the host.
func TestSubPathMounts(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "vol-subpath-", Namespace: podNS},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{
				Name: "plant", Image: harness.BusyboxImage, VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
				Command: []string{"sh", "-c", "mkdir -p /data/a/b /data/main && echo inside > /data/a/b/f && ln -s / /data/escape"},
			}},
			Containers: []corev1.Container{func() corev1.Container {
				c := sleeper("main",
					corev1.VolumeMount{Name: "data", MountPath: "/sub", SubPath: "a/b"},
					corev1.VolumeMount{Name: "data", MountPath: "/expr", SubPathExpr: "$(POD_NAME_DIR)"},
				)
				c.Env = []corev1.EnvVar{{Name: "POD_NAME_DIR", Value: "main"}}
				return c
			}()},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	pod = waitPod(t, createPod(t, pod), 2*time.Minute, runningAndReady)
	if got := mustExec(t, pod, "main", "cat", "/sub/f"); got != "inside\n" {
		t.Errorf("/sub/f = %q, want the file from a/b", got)
	}
	mustExec(t, pod, "main", "sh", "-c", "echo expr > /expr/g")

	escape := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "vol-escape-", Namespace: podNS},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{
				Name: "plant", Image: harness.BusyboxImage, VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
				Command: []string{"sh", "-c", "ln -s / /data/escape"},
			}},
			Containers: []corev1.Container{sleeper("main", corev1.VolumeMount{Name: "data", MountPath: "/host-root", SubPath: "escape"})},
			Volumes:    []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	escape = createPod(t, escape)
	p := waitingReasons(t, escape, 2*time.Minute, "CreateContainerConfigError")
	for _, st := range p.Status.ContainerStatuses {
		if st.Name == "main" && (st.State.Waiting == nil || !strings.Contains(st.State.Waiting.Message, `failed to prepare subPath for volumeMount "data" of container "main"`)) {
			t.Errorf("escaping subPath: %s, want the kubelet's subPath message", describeStatuses(p.Status.ContainerStatuses))
		}
	}
	// Nothing of the host was bound for it.
	for _, m := range harness.MountsUnder(filepath.Join(agentRootDir(t), "pods", string(escape.UID))) {
		if strings.Contains(m, "volume-subpaths") {
			t.Errorf("a subPath bind was left for the escaping mount: %s", m)
		}
	}
}

// TestVolumesTornDownWithThePod: deleting a pod with a tmpfs and a subPath bind leaves no mount
// and no directory; a pod that ran to completion has its volumes torn down while it stays.
func TestVolumesTornDownWithThePod(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	cs := framework.Client(t)
	ctx := framework.Context(t, 4*time.Minute)
	mk := func(prefix string, policy corev1.RestartPolicy, script string) *corev1.Pod {
		grace := int64(1)
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: prefix, Namespace: podNS},
			Spec: corev1.PodSpec{
				RestartPolicy: policy, TerminationGracePeriodSeconds: &grace,
				Containers: []corev1.Container{{
					Name: "main", Image: harness.BusyboxImage, Command: []string{"sh", "-c", script},
					VolumeMounts: []corev1.VolumeMount{{Name: "mem", MountPath: "/mem"}, {Name: "mem", MountPath: "/sub", SubPath: "s"}},
				}},
				Volumes: []corev1.Volume{{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}},
			},
		}
	}
	running := waitPod(t, createPod(t, mk("vol-teardown-", corev1.RestartPolicyAlways, "trap 'exit 0' TERM; sleep 3600 & wait")), 2*time.Minute, runningAndReady)
	done := waitPod(t, createPod(t, mk("vol-done-", corev1.RestartPolicyNever, "echo ok > /mem/f")), 2*time.Minute, phaseIs(corev1.PodSucceeded))

	podDir := func(p *corev1.Pod) string { return filepath.Join(agentRootDir(t), "pods", string(p.UID)) }
	if got := harness.MountsUnder(podDir(running)); len(got) < 3 { // tmpfs, subPath bind, token volume
		t.Fatalf("mounts of the running pod: %v, want its tmpfs, subPath and token volume", got)
	}
	framework.Eventually(t, time.Minute, func() error {
		if got := harness.MountsUnder(podDir(done)); len(got) != 0 {
			return fmt.Errorf("the finished pod still has mounts: %v", got)
		}
		return nil
	})
	zero := int64(0)
	if err := cs.CoreV1().Pods(podNS).Delete(ctx, running.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, func() error {
		if got := harness.MountsUnder(podDir(running)); len(got) != 0 {
			return fmt.Errorf("mounts left after the pod was deleted: %v", got)
		}
		if _, err := os.Stat(podDir(running)); !os.IsNotExist(err) {
			return fmt.Errorf("pod directory still there: %v", err)
		}
		return nil
	})
}

// TestVolumeCyclesLeaveNothing: 200 pods with one volume of each node-local kind (and a subPath)
// created and deleted, ten at a time, leave no mount and no directory behind.
func TestVolumeCyclesLeaveNothing(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	cs := framework.Client(t)
	ctx := framework.Context(t, 10*time.Minute)
	cm, err := cs.CoreV1().ConfigMaps(podNS).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "vol-cycle-"}, Data: map[string]string{"k": "v"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().ConfigMaps(podNS).Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
	})
	sec, err := cs.CoreV1().Secrets(podNS).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "vol-cycle-"}, Data: map[string][]byte{"k": []byte("v")},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Secrets(podNS).Delete(context.Background(), sec.Name, metav1.DeleteOptions{})
	})
	hostDir := filepath.Join(framework.Cluster(t).RunDir, "e2e-hostpath", fmt.Sprint("cycles-", time.Now().UnixNano()))
	t.Cleanup(func() { _ = os.RemoveAll(hostDir) })
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	grace := int64(0)
	spec := corev1.PodSpec{
		TerminationGracePeriodSeconds: &grace,
		Containers: []corev1.Container{sleeper("main",
			corev1.VolumeMount{Name: "disk", MountPath: "/disk"},
			corev1.VolumeMount{Name: "disk", MountPath: "/sub", SubPath: "s"},
			corev1.VolumeMount{Name: "mem", MountPath: "/mem"},
			corev1.VolumeMount{Name: "host", MountPath: "/host"},
			corev1.VolumeMount{Name: "cm", MountPath: "/cm"},
			corev1.VolumeMount{Name: "secret", MountPath: "/secret"},
			corev1.VolumeMount{Name: "info", MountPath: "/info"},
		)},
		Volumes: []corev1.Volume{
			{Name: "disk", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
			{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostDir, Type: &dirOrCreate}}},
			{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}},
			{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: sec.Name}}},
			{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
				Items: []corev1.DownwardAPIVolumeFile{{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			}}},
		},
	}
	const total, batch = 200, 10
	var uids []types.UID
	for done := 0; done < total; done += batch {
		var pods []*corev1.Pod
		for range batch {
			p, err := cs.CoreV1().Pods(podNS).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "vol-cycle-", Namespace: podNS}, Spec: *spec.DeepCopy(),
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pods = append(pods, p)
			uids = append(uids, p.UID)
		}
		for _, p := range pods {
			waitPod(t, p, 2*time.Minute, runningAndReady)
		}
		for _, p := range pods {
			if err := cs.CoreV1().Pods(podNS).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
				t.Fatal(err)
			}
		}
	}
	podsDir := filepath.Join(agentRootDir(t), "pods")
	framework.Eventually(t, 2*time.Minute, func() error {
		var left []string
		for _, uid := range uids {
			dir := filepath.Join(podsDir, string(uid))
			left = append(left, harness.MountsUnder(dir)...)
			if _, err := os.Lstat(dir); err == nil {
				left = append(left, dir)
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("%d mounts or directories left after %d pods, e.g. %v", len(left), total, left[:min(len(left), 5)])
		}
		return nil
	})
}

// TestSubPathSymlinkSwapRace: one container flips a symlink between a directory inside the
// volume and a path escaping it while the agent prepares another container's subPath on it.
// Whatever the timing, the container gets the directory or a subPath error, never the host.
func TestSubPathSymlinkSwapRace(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "vol-swap-", Namespace: podNS},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{
				Name: "prepare", Image: harness.BusyboxImage, VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
				Command: []string{"sh", "-c", "mkdir -p /data/real && touch /data/real/marker && ln -sfn real /data/link"},
			}},
			Containers: []corev1.Container{
				{
					Name: "flipper", Image: harness.BusyboxImage, VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					Command: []string{"sh", "-c", "cd /data; while true; do ln -sfn real link; ln -sfn ../../../../../../../.. link; ln -sfn / link; done"},
				},
				{
					Name: "victim", Image: harness.BusyboxImage, VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/mnt", SubPath: "link"}},
					// Anything but the volume's directory is evidence: exit 1 with what it saw.
					Command: []string{"sh", "-c", "if [ -f /mnt/marker ]; then exec sleep 3600; fi; ls /mnt > /dev/termination-log; exit 1"},
				},
			},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	pod = createPod(t, pod)
	// The agent retries a failed subPath on every sync: let it try a while, then look at what happened.
	var sawError, sawRunning bool
	deadline := time.Now().Add(40 * time.Second)
	for time.Now().Before(deadline) {
		p, err := framework.Client(t).CoreV1().Pods(podNS).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range p.Status.ContainerStatuses {
			if st.Name != "victim" {
				continue
			}
			if st.RestartCount > 0 || st.State.Terminated != nil || st.LastTerminationState.Terminated != nil {
				t.Fatalf("the victim container ran without its volume's directory: %s %+v", describeStatuses(p.Status.ContainerStatuses), st.LastTerminationState.Terminated)
			}
			if w := st.State.Waiting; w != nil && w.Reason == "CreateContainerConfigError" {
				if !strings.Contains(w.Message, "failed to prepare subPath") {
					t.Errorf("victim waiting: %s, want the subPath message", w.Message)
				}
				sawError = true
			}
			if st.State.Running != nil {
				sawRunning = true
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !sawError && !sawRunning {
		t.Errorf("the victim container was neither refused nor running in 40 s")
	}
	t.Logf("subPath refused while escaping: %v; started on the real directory: %v", sawError, sawRunning)
}

// TestMountPropagation: a privileged container's mount in a Bidirectional volume reaches the
// host and, through it, a HostToContainer sibling; it is gone with the pod.
func TestMountPropagation(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	cs := framework.Client(t)
	ctx := framework.Context(t, 3*time.Minute)
	bidi, h2c := corev1.MountPropagationBidirectional, corev1.MountPropagationHostToContainer
	privileged := true
	maker := sleeper("maker", corev1.VolumeMount{Name: "shared", MountPath: "/shared", MountPropagation: &bidi})
	maker.SecurityContext = &corev1.SecurityContext{Privileged: &privileged}
	maker.Command = []string{"sh", "-c", "mkdir -p /shared/m && mount -t tmpfs tmpfs /shared/m && echo propagated > /shared/m/f && trap 'umount /shared/m; exit 0' TERM; sleep 3600 & wait"}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "vol-propagation-", Namespace: podNS},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{maker, sleeper("watcher", corev1.VolumeMount{Name: "shared", MountPath: "/shared", MountPropagation: &h2c})},
			Volumes:    []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	pod = waitPod(t, createPod(t, pod), 2*time.Minute, runningAndReady)
	framework.Eventually(t, 30*time.Second, func() error {
		out, err := podExec(t, pod, "watcher", "cat", "/shared/m/f")
		if err != nil || out != "propagated\n" {
			return fmt.Errorf("watcher reads %q (%v), want the file on the maker's tmpfs", out, err)
		}
		return nil
	})
	hostSide := filepath.Join(agentRootDir(t), "pods", string(pod.UID), "volumes", "kubernetes.io~empty-dir", "shared", "m")
	if got := harness.MountsUnder(hostSide); len(got) == 0 {
		t.Errorf("the maker's mount did not reach the host at %s", hostSide)
	}
	zero := int64(0)
	if err := cs.CoreV1().Pods(podNS).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	podDir := filepath.Join(agentRootDir(t), "pods", string(pod.UID))
	framework.Eventually(t, time.Minute, func() error {
		if got := harness.MountsUnder(podDir); len(got) > 0 {
			return fmt.Errorf("mounts left after the pod was deleted: %v", got)
		}
		if _, err := os.Stat(podDir); !os.IsNotExist(err) {
			return fmt.Errorf("pod directory still there: %v", err)
		}
		return nil
	})
}

// TestHostPathTypeChecks: a hostPath of the wrong type holds the pod with the kubelet's message;
// FileOrCreate creates the file.
func TestHostPathTypeChecks(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	base := filepath.Join(framework.Cluster(t).RunDir, "e2e-hostpath", fmt.Sprint("types-", time.Now().UnixNano()))
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if err := os.WriteFile(filepath.Join(base, "regular"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	typed := func(prefix, path string, typ corev1.HostPathType) *corev1.Pod {
		return createPod(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: prefix, Namespace: podNS},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{sleeper("main", corev1.VolumeMount{Name: "h", MountPath: "/h"})},
				Volumes:    []corev1.Volume{{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &typ}}}},
			},
		})
	}
	bad := []struct {
		path string
		typ  corev1.HostPathType
		noun string
	}{
		{filepath.Join(base, "regular"), corev1.HostPathDirectory, "directory"},
		{filepath.Join(base, "missing"), corev1.HostPathFile, "file"},
		{filepath.Join(base, "regular"), corev1.HostPathSocket, "socket file"},
		{"/dev/null", corev1.HostPathBlockDev, "block device"},
	}
	var pods []*corev1.Pod
	for _, b := range bad {
		pods = append(pods, typed("vol-hosttype-", b.path, b.typ))
	}
	created := typed("vol-hostcreate-", filepath.Join(base, "made"), corev1.HostPathFileOrCreate)
	chardev := typed("vol-hostchar-", "/dev/null", corev1.HostPathCharDev)
	for i, b := range bad {
		want := fmt.Sprintf(`MountVolume.SetUp failed for volume "h" : hostPath type check failed: %s is not a %s`, b.path, b.noun)
		framework.Eventually(t, time.Minute, func() error {
			if ev := podEvents(t, pods[i]); !hasEvent(ev, "FailedMount", want) {
				return fmt.Errorf("no FailedMount %q; events:\n%s", want, eventSummary(ev))
			}
			return nil
		})
	}
	waitPod(t, created, 2*time.Minute, runningAndReady)
	if fi, err := os.Stat(filepath.Join(base, "made")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("FileOrCreate did not create a file: %v", err)
	}
	waitPod(t, chardev, 2*time.Minute, runningAndReady)
}

// TestServiceAccountTokenRotates: a projected token with the shortest expiration the API allows
// (10 min) is replaced before it expires (at 80% of its life, as the kubelet), and the new one
// is accepted by the apiserver.
//
// It must stay the last test of the package (the last in its last file). It makes its pod
// before calling t.Parallel, so the pod is made after every sequential test (those restart,
// kill and cut off the agent) and just before the parallel tests start: the token's 8
// minutes then run beside the whole parallel phase, not after whichever tests got a slot
// first (about 6 minutes of a fresh make test).
func TestServiceAccountTokenRotates(t *testing.T) {
	requireNodeagent(t)
	cs := framework.Client(t)
	exp := int64(600)
	const audience = "nodeagent-e2e"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "vol-token-", Namespace: podNS},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{sleeper("main", corev1.VolumeMount{Name: "tok", MountPath: "/tok"})},
			Volumes: []corev1.Volume{{Name: "tok", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
					Audience: audience, ExpirationSeconds: &exp, Path: "token",
				}}},
			}}}},
		},
	}
	pod = waitPod(t, createPod(t, pod), 2*time.Minute, runningAndReady)
	first := mustExec(t, pod, "main", "cat", "/tok/token")
	claims := jwtClaims(t, first)
	if life := claims.Exp - claims.Iat; life != exp {
		t.Fatalf("token lifetime %d s, want %d", life, exp)
	}
	t.Parallel()
	// Until the first token expires: the test may resume any time after the pod was made.
	var second string
	framework.Eventually(t, max(time.Until(time.Unix(claims.Exp, 0)), 30*time.Second), func() error {
		second = mustExec(t, pod, "main", "cat", "/tok/token")
		if second == first {
			return fmt.Errorf("token not rotated yet (issued %s)", time.Unix(claims.Iat, 0).UTC().Format(time.TimeOnly))
		}
		return nil
	})
	rotatedAt := time.Now().Unix()
	if age := rotatedAt - claims.Iat; age < exp*8/10-5 {
		t.Errorf("token rotated after %d s, want at 80%% of %d s", age, exp)
	}
	ctx := framework.Context(t, 30*time.Second)
	review, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: second, Audiences: []string{audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !review.Status.Authenticated {
		t.Errorf("the rotated token is not accepted: %s", review.Status.Error)
	}
}

type tokenClaims struct{ Iat, Exp int64 }

// jwtClaims decodes a JWT's issued-at and expiry (not its signature: the apiserver checks that).
func jwtClaims(t *testing.T, token string) tokenClaims {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %.40q", token)
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatalf("JWT payload: %v", err)
	}
	var c tokenClaims
	if err := json.Unmarshal(payload, &c); err != nil {
		t.Fatalf("JWT claims: %v", err)
	}
	return c
}
