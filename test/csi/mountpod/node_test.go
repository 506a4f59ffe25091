package mountpod

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeMounter records bind mounts instead of making them. served holds the mount points
// mount pods made.
type fakeMounter struct {
	mounts map[string]string // target -> source
	served map[string]bool
	calls  []string
}

func newFakeMounter() *fakeMounter {
	return &fakeMounter{mounts: map[string]string{}, served: map[string]bool{}}
}

func (m *fakeMounter) Bind(source, target string, readOnly bool) error {
	m.calls = append(m.calls, "bind "+target)
	if readOnly {
		m.calls[len(m.calls)-1] += " ro"
	}
	if _, err := os.Stat(target); err != nil {
		return err
	}
	m.mounts[target] = source
	return nil
}

func (m *fakeMounter) Unmount(target string) error {
	if _, ok := m.mounts[target]; ok || m.served[target] {
		m.calls = append(m.calls, "unmount "+target)
	}
	delete(m.mounts, target)
	delete(m.served, target)
	return nil
}

func (m *fakeMounter) IsMountPoint(path string) (bool, error) {
	_, ok := m.mounts[path]
	return ok || m.served[path], nil
}

const (
	testNS   = "mounts"
	testNode = "node-a"
)

// fixture is a driver on a fake clientset whose mount pods become Ready when created
// unless notReady is set.
type fixture struct {
	d        *Driver
	cs       *fake.Clientset
	mount    *fakeMounter
	podsDir  string
	notReady bool
}

func newFixture(t *testing.T, mutate ...func(*Config)) *fixture {
	t.Helper()
	f := &fixture{cs: fake.NewClientset(), mount: newFakeMounter(), podsDir: t.TempDir()}
	f.cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if !f.notReady {
			pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
			pod.Status.Phase = corev1.PodRunning
			pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}
		return false, nil, nil
	})
	cfg := Config{NodeID: testNode, StateDir: t.TempDir(), Namespace: testNS, Image: "busybox", Client: f.cs,
		PollInterval: time.Millisecond, ReadyTimeout: 5 * time.Second, GoneTimeout: 5 * time.Second}
	for _, m := range mutate {
		m(&cfg)
	}
	d, err := newDriver(cfg, f.mount)
	if err != nil {
		t.Fatal(err)
	}
	f.d = d
	return f
}

// serve does what a mount pod does on the host: the volume's directory with a file
// system mounted on mnt.
func (f *fixture) serve(t *testing.T, handle string) {
	t.Helper()
	mnt := f.d.mountPoint(handle)
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	f.mount.served[mnt] = true
}

// target returns a target path whose parent exists, as the CO makes it.
func (f *fixture) target(t *testing.T, pod string) string {
	t.Helper()
	dir := filepath.Join(f.podsDir, pod, "volumes", "kubernetes.io~csi", "pv")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "mount")
}

func publishReq(handle, target string) *csi.NodePublishVolumeRequest {
	return &csi.NodePublishVolumeRequest{VolumeId: handle, TargetPath: target, VolumeCapability: &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	}}
}

func (f *fixture) mountPods(t *testing.T) []corev1.Pod {
	t.Helper()
	list, err := f.cs.CoreV1().Pods(testNS).List(context.Background(), metav1.ListOptions{LabelSelector: LabelApp + "=" + LabelAppValue})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func TestPublishSharesOneMountPod(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const handle = "vol-1"
	f.serve(t, handle)
	a, b := f.target(t, "a"), f.target(t, "b")

	for _, target := range []string{a, b, a} { // a's second publish is a CO's retry
		if _, err := f.d.NodePublishVolume(ctx, publishReq(handle, target)); err != nil {
			t.Fatalf("publish at %s: %v", target, err)
		}
	}
	pods := f.mountPods(t)
	if len(pods) != 1 {
		t.Fatalf("%d mount pods, want 1", len(pods))
	}
	p := pods[0]
	if p.Name != mountPodName(testNode, handle) || p.Spec.NodeName != testNode || p.Annotations[AnnotationHandle] != handle {
		t.Errorf("mount pod %s on node %q for %q", p.Name, p.Spec.NodeName, p.Annotations[AnnotationHandle])
	}
	if got := Users(&p); !slices.Equal(got, []string{a, b}) {
		t.Errorf("users %q, want %q", got, []string{a, b})
	}
	if want := []string{"bind " + a, "bind " + b}; !slices.Equal(f.mount.calls, want) {
		t.Errorf("mounter calls %q, want %q", f.mount.calls, want)
	}
	for _, target := range []string{a, b} {
		if f.mount.mounts[target] != f.d.mountPoint(handle) {
			t.Errorf("%s holds %q, want the mount pod's %s", target, f.mount.mounts[target], f.d.mountPoint(handle))
		}
	}

	// The first user leaves: the mount pod stays for the other.
	if _, err := f.d.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: handle, TargetPath: a}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a); !os.IsNotExist(err) {
		t.Errorf("target %s not removed: %v", a, err)
	}
	pods = f.mountPods(t)
	if len(pods) != 1 || !slices.Equal(Users(&pods[0]), []string{b}) {
		t.Fatalf("after one user left: mount pods %v", pods)
	}

	// The last user leaves: the mount pod and the volume's directory go.
	for range 2 { // the second time is a CO's retry
		if _, err := f.d.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: handle, TargetPath: b}); err != nil {
			t.Fatal(err)
		}
	}
	if pods := f.mountPods(t); len(pods) != 0 {
		t.Errorf("mount pods left: %v", pods)
	}
	if _, err := os.Stat(volumeDir(f.d.cfg.StateDir, testNode, handle)); !os.IsNotExist(err) {
		t.Errorf("volume dir left: %v", err)
	}
	if len(f.mount.mounts)+len(f.mount.served) > 0 {
		t.Errorf("mounts left: %v %v", f.mount.mounts, f.mount.served)
	}
}

func TestPublishWaitsUntilMountPodReady(t *testing.T) {
	f := newFixture(t)
	f.notReady = true
	const handle = "vol-1"
	f.serve(t, handle)
	target := f.target(t, "a")
	done := make(chan error, 1)
	go func() {
		_, err := f.d.NodePublishVolume(context.Background(), publishReq(handle, target))
		done <- err
	}()
	pods := f.cs.CoreV1().Pods(testNS)
	var pod *corev1.Pod
	for pod == nil {
		p, err := pods.Get(context.Background(), mountPodName(testNode, handle), metav1.GetOptions{})
		if err == nil {
			pod = p
		} else if !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("publish returned before the mount pod was ready: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err := pods.UpdateStatus(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("publish: %v", err)
	}
	if f.mount.mounts[target] == "" {
		t.Errorf("target not mounted")
	}
}

func TestPublishFailsUntilServed(t *testing.T) {
	tests := []struct {
		name     string
		notReady bool
		pod      *corev1.Pod // there before the publish
		served   bool
	}{
		{name: "mount pod never ready", notReady: true, served: true},
		{name: "ready but nothing mounted", served: false},
		{name: "mount pod terminating", served: true, pod: func() *corev1.Pod {
			p := mountPodSpec(Config{NodeID: testNode, Namespace: testNS}, "vol-1")
			p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
			p.Finalizers = []string{"test/hold"}
			return p
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, func(c *Config) { c.ReadyTimeout = 20 * time.Millisecond })
			f.notReady = tt.notReady
			if tt.pod != nil {
				if err := f.cs.Tracker().Add(tt.pod); err != nil {
					t.Fatal(err)
				}
			}
			if tt.served {
				f.serve(t, "vol-1")
			}
			target := f.target(t, "a")
			_, err := f.d.NodePublishVolume(context.Background(), publishReq("vol-1", target))
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("publish: %v, want Unavailable for the CO to retry", err)
			}
			if len(f.mount.mounts) > 0 {
				t.Errorf("mounted %v", f.mount.mounts)
			}
			for _, p := range f.mountPods(t) {
				if users := Users(&p); len(users) > 0 {
					t.Errorf("users recorded: %q", users)
				}
			}
		})
	}
}

func TestPublishReadOnly(t *testing.T) {
	f := newFixture(t)
	f.serve(t, "vol-1")
	target := f.target(t, "a")
	req := publishReq("vol-1", target)
	req.Readonly = true
	if _, err := f.d.NodePublishVolume(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if want := []string{"bind " + target + " ro"}; !slices.Equal(f.mount.calls, want) {
		t.Errorf("mounter calls %q, want %q", f.mount.calls, want)
	}
}

func TestPublishInvalid(t *testing.T) {
	f := newFixture(t)
	target := f.target(t, "a")
	tests := []struct {
		name   string
		mutate func(*csi.NodePublishVolumeRequest)
	}{
		{name: "no volume ID", mutate: func(r *csi.NodePublishVolumeRequest) { r.VolumeId = "" }},
		{name: "no target", mutate: func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "" }},
		{name: "no capability", mutate: func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability = nil }},
		{name: "block access", mutate: func(r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := publishReq("vol-1", target)
			tt.mutate(req)
			if _, err := f.d.NodePublishVolume(context.Background(), req); status.Code(err) != codes.InvalidArgument {
				t.Errorf("publish: %v, want InvalidArgument", err)
			}
		})
	}
	if pods := f.mountPods(t); len(pods) > 0 {
		t.Errorf("mount pods made for invalid requests: %d", len(pods))
	}
}

func TestMountPodSpec(t *testing.T) {
	cfg := Config{DriverName: DefaultDriverName, NodeID: testNode, Namespace: testNS, StateDir: "/var/lib/mountpod",
		Image: "busybox", MountPodDelay: 1500 * time.Millisecond}
	p := mountPodSpec(cfg, "vol-1")
	c := p.Spec.Containers[0]
	switch {
	case p.Namespace != testNS || p.Spec.NodeName != testNode:
		t.Errorf("pod %s/%s on %q", p.Namespace, p.Name, p.Spec.NodeName)
	case p.Labels[LabelVolume] != volumeKey(testNode, "vol-1"):
		t.Errorf("labels %v", p.Labels)
	case c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged:
		t.Errorf("container not privileged")
	case len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPropagation == nil || *c.VolumeMounts[0].MountPropagation != corev1.MountPropagationBidirectional:
		t.Errorf("volume mounts %+v, want one Bidirectional", c.VolumeMounts)
	case p.Spec.Volumes[0].HostPath == nil || p.Spec.Volumes[0].HostPath.Path != volumeDir(cfg.StateDir, testNode, "vol-1"):
		t.Errorf("volumes %+v", p.Spec.Volumes)
	case c.ReadinessProbe == nil || !slices.Equal(c.ReadinessProbe.Exec.Command, []string{"grep", "-q", " /served/mnt tmpfs ", "/proc/mounts"}):
		t.Errorf("readiness probe %+v", c.ReadinessProbe)
	case len(c.Command) != 3 || !slices.Contains(strings.Split(c.Command[2], "\n"), "sleep 1.5 & wait $!"):
		t.Errorf("script does not wait 1.5s first:\n%s", c.Command[2])
	}
}

// A volume whose mount pod is slow holds up its own calls only.
func TestSlowVolumeHoldsUpItselfOnly(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.ReadyTimeout = time.Minute })
	f.notReady = true
	ready := mountPodSpec(f.d.cfg, "fast")
	ready.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := f.cs.Tracker().Add(ready); err != nil {
		t.Fatal(err)
	}
	f.serve(t, "slow")
	f.serve(t, "fast")
	ctx, cancel := context.WithCancel(context.Background())
	slow := make(chan error, 1)
	slowTarget := f.target(t, "a")
	go func() {
		_, err := f.d.NodePublishVolume(ctx, publishReq("slow", slowTarget))
		slow <- err
	}()
	for len(f.mountPods(t)) < 2 { // the slow volume's mount pod is made: its call waits
	}
	if _, err := f.d.NodePublishVolume(context.Background(), publishReq("fast", f.target(t, "b"))); err != nil {
		t.Fatalf("publish of the fast volume: %v", err)
	}
	select {
	case err := <-slow:
		t.Fatalf("the slow volume's publish returned: %v", err)
	default:
	}
	cancel()
	if err := <-slow; status.Code(err) != codes.Unavailable {
		t.Errorf("the slow volume's publish, cancelled: %v, want Unavailable", err)
	}
}
