package volume

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

func configMap(name string, data map[string]string) *v1.ConfigMap {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Data: data}
}

func secret(name string, data map[string]string) *v1.Secret {
	s := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// kubeAPIAccess is the volume the ServiceAccount admission plugin adds to
// every pod.
func kubeAPIAccess(p *v1.Pod) {
	withVolume("kube-api-access-x7k2p", v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		DefaultMode: ptr(int32(0o644)),
		Sources: []v1.VolumeProjection{
			{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr(int64(3607))}},
			{ConfigMap: &v1.ConfigMapProjection{
				LocalObjectReference: v1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items:                []v1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			}},
			{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{{
				Path: "namespace", FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"},
			}}}},
		},
	}})(p)
}

func readVol(t *testing.T, m Mount, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.HostPath, rel))
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	return string(b)
}

func TestMountPodKubeAPIAccess(t *testing.T) {
	f := newFixture(t, configMap("kube-root-ca.crt", map[string]string{"ca.crt": "PEM"}))
	pod := basePod(kubeAPIAccess)
	mounts, err := f.mgr.MountPod(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	m := mounts["kube-api-access-x7k2p"]
	wantDir := filepath.Join(f.root, "pods/uid-1/volumes/kubernetes.io~projected/kube-api-access-x7k2p")
	if m.HostPath != wantDir || !m.ReadOnly || !m.Managed || m.Plugin != projectedPluginName {
		t.Fatalf("mount = %+v", m)
	}
	for rel, want := range map[string]string{"token": "token-1", "ca.crt": "PEM", "namespace": "ns"} {
		if got := readVol(t, m, rel); got != want {
			t.Errorf("%s = %q, want %q", rel, got, want)
		}
	}
	if strings.Join(f.mounter.mounts, "|") != "tmpfs "+wantDir+" " {
		t.Errorf("mounts = %q", f.mounter.mounts)
	}
	for _, d := range []string{"plugins", "containers", "volumes"} {
		if fi, err := os.Stat(filepath.Join(f.root, "pods/uid-1", d)); err != nil || !fi.IsDir() {
			t.Errorf("pod dir %s: %v", d, err)
		}
	}
	// A second sync: no new token, no new mount.
	if _, err := f.mgr.MountPod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if f.tokens.count() != 1 || len(f.mounter.mounts) != 1 {
		t.Errorf("second sync: %d token requests, %d mounts", f.tokens.count(), len(f.mounter.mounts))
	}
}

func TestMountPodKinds(t *testing.T) {
	hostDir := t.TempDir()
	objects := []runtime.Object{
		configMap("app", map[string]string{"a.conf": "A", "b.conf": "B"}),
		secret("creds", map[string]string{"user": "u", "pass": "p"}),
	}
	tests := []struct {
		name    string
		volume  v1.VolumeSource
		files   map[string]string
		modes   map[string]os.FileMode
		plugin  string
		ro      bool
		tmpfs   bool
		wantErr string
	}{
		{name: "configMap all keys", volume: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "app"}}},
			files: map[string]string{"a.conf": "A", "b.conf": "B"}, modes: map[string]os.FileMode{"a.conf": 0o644},
			plugin: configMapPluginName, ro: true},
		{name: "configMap items with modes", volume: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "app"}, DefaultMode: ptr(int32(0o600)),
			Items: []v1.KeyToPath{{Key: "a.conf", Path: "conf/a"}, {Key: "b.conf", Path: "b", Mode: ptr(int32(0o755))}}}},
			files: map[string]string{"conf/a": "A", "b": "B"}, modes: map[string]os.FileMode{"conf/a": 0o600, "b": 0o755},
			plugin: configMapPluginName, ro: true},
		{name: "configMap missing", volume: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "gone"}}},
			wantErr: `MountVolume.SetUp failed for volume "v" : configmap "gone" not found`},
		{name: "configMap missing optional", volume: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "gone"}, Optional: ptr(true)}},
			files: map[string]string{}, plugin: configMapPluginName, ro: true},
		{name: "configMap missing key", volume: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "app"}, Items: []v1.KeyToPath{{Key: "nope", Path: "x"}}}},
			wantErr: "configMap app references non-existent key: nope"},
		{name: "configMap hostile item path", volume: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "app"}, Items: []v1.KeyToPath{{Key: "a.conf", Path: "../../etc/x"}}}},
			wantErr: "must not start with '..'"},
		{name: "secret on tmpfs", volume: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "creds", DefaultMode: ptr(int32(0o400))}},
			files: map[string]string{"user": "u", "pass": "p"}, modes: map[string]os.FileMode{"pass": 0o400},
			plugin: secretPluginName, ro: true, tmpfs: true},
		{name: "secret missing", volume: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "nope"}},
			wantErr: `secret "nope" not found`},
		{name: "secret missing optional", volume: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "nope", Optional: ptr(true)}},
			files: map[string]string{}, plugin: secretPluginName, ro: true, tmpfs: true},
		{name: "downwardAPI", volume: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}},
			files: map[string]string{"labels": "app=\"web\"\ntier=\"front\""}, plugin: downwardAPIPluginName, ro: true, tmpfs: true},
		{name: "projected merges sources", volume: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
			DefaultMode: ptr(int32(0o440)),
			Sources: []v1.VolumeProjection{
				{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "app"}}},
				{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "creds"},
					Items: []v1.KeyToPath{{Key: "user", Path: "creds/user"}}}},
			}}},
			files: map[string]string{"a.conf": "A", "b.conf": "B", "creds/user": "u"}, modes: map[string]os.FileMode{"creds/user": 0o440},
			plugin: projectedPluginName, ro: true, tmpfs: true},
		{name: "projected reports every failed source", volume: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
			Sources: []v1.VolumeProjection{
				{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "gone1"}}},
				{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "gone2"}}},
			}}},
			wantErr: `configmap "gone1" not found` + "\n" + `secret "gone2" not found`},
		{name: "hostPath", volume: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: hostDir}},
			plugin: hostPathPluginName},
		{name: "image: nothing on the host, read-only", volume: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: "busybox:1", PullPolicy: v1.PullIfNotPresent}},
			plugin: imagePluginName, ro: true},
		{name: "persistentVolumeClaim not supported yet", volume: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}},
			wantErr: "not supported"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, objects...)
			pod := basePod(withVolume("v", tc.volume))
			mounts, err := f.mgr.MountPod(context.Background(), pod)
			if tc.wantErr != "" {
				var me *MountError
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.As(err, &me) || me.Volume != "v" {
					t.Fatalf("err = %v, want a MountError containing %q", err, tc.wantErr)
				}
				if _, ok := mounts["v"]; ok {
					t.Error("failed volume returned a mount")
				}
				// A failed first set-up leaves no volume directory.
				vols, _ := f.mgr.volumesOnDisk(pod.UID)
				if len(vols) != 0 {
					t.Errorf("failed set-up left %v", vols)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			m := mounts["v"]
			if m.Plugin != tc.plugin || m.ReadOnly != tc.ro {
				t.Errorf("mount = %+v", m)
			}
			if tc.plugin == hostPathPluginName {
				if m.HostPath != hostDir {
					t.Errorf("hostPath = %s", m.HostPath)
				}
				return
			}
			if tc.plugin == imagePluginName {
				// The runtime mounts the image: no host path, no directory, no mount.
				vols, _ := f.mgr.volumesOnDisk(pod.UID)
				if !m.Image || m.HostPath != "" || m.Managed || len(vols) != 0 || len(f.mounter.mounts) != 0 {
					t.Errorf("image volume = %+v, on disk %v, mounts %q", m, vols, f.mounter.mounts)
				}
				if dirs := f.mgr.VolumeDirs(pod); len(dirs) != 0 {
					t.Errorf("VolumeDirs = %v, want none to measure", dirs)
				}
				return
			}
			if want := f.mgr.layout.Pod(pod.UID).VolumeDir(tc.plugin, "v"); m.HostPath != want {
				t.Errorf("path = %s, want %s", m.HostPath, want)
			}
			for rel, want := range tc.files {
				if got := readVol(t, m, rel); got != want {
					t.Errorf("%s = %q, want %q", rel, got, want)
				}
			}
			for rel, want := range tc.modes {
				fi, err := os.Stat(filepath.Join(m.HostPath, rel))
				if err != nil || fi.Mode().Perm() != want {
					t.Errorf("%s mode = %v (%v), want %v", rel, fi.Mode().Perm(), err, want)
				}
			}
			if got := len(f.mounter.mounts) == 1; got != tc.tmpfs {
				t.Errorf("mounts = %q, want tmpfs=%v", f.mounter.mounts, tc.tmpfs)
			}
		})
	}
}

func TestMountPodUpdatesContent(t *testing.T) {
	f := newFixture(t, configMap("app", map[string]string{"a": "1", "old": "x"}))
	pod := basePod(withVolume("cfg", v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "app"}}}),
		withVolume("info", v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}}))
	ctx := context.Background()
	mounts, err := f.mgr.MountPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.CoreV1().ConfigMaps("ns").Update(ctx, configMap("app", map[string]string{"a": "2", "new": "y"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod.Labels = map[string]string{"app": "web2"}
	if _, err := f.mgr.MountPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if got := readVol(t, mounts["cfg"], "a"); got != "2" {
		t.Errorf("a = %q after update", got)
	}
	if got := readVol(t, mounts["cfg"], "new"); got != "y" {
		t.Errorf("new = %q after update", got)
	}
	if _, err := os.Lstat(filepath.Join(mounts["cfg"].HostPath, "old")); !os.IsNotExist(err) {
		t.Errorf("stale key still present: %v", err)
	}
	if got := readVol(t, mounts["info"], "labels"); got != `app="web2"` {
		t.Errorf("labels = %q after update", got)
	}
	if len(f.mounter.mounts) != 1 {
		t.Errorf("update remounted: %q", f.mounter.mounts)
	}
	// The configMap disappears: the error is reported, the old files stay.
	if err := f.client.CoreV1().ConfigMaps("ns").Delete(ctx, "app", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.mgr.MountPod(ctx, pod); err == nil {
		t.Error("deleted configMap not reported")
	}
	if got := readVol(t, mounts["cfg"], "a"); got != "2" {
		t.Errorf("a = %q after configMap deletion", got)
	}
}

func TestMountPodOneFailureDoesNotStopOthers(t *testing.T) {
	f := newFixture(t, configMap("app", map[string]string{"a": "1"}))
	pod := basePod(
		withVolume("bad", v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "missing"}}),
		withVolume("good", v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "app"}}}),
		withVolume("scratch", v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}),
	)
	mounts, err := f.mgr.MountPod(context.Background(), pod)
	if err == nil || !strings.Contains(err.Error(), `volume "bad"`) {
		t.Fatalf("err = %v", err)
	}
	if _, ok := mounts["good"]; !ok {
		t.Error("good volume not set up")
	}
	if _, ok := mounts["scratch"]; !ok {
		t.Error("emptyDir not set up")
	}
}

func TestMountPodRejectsBadUID(t *testing.T) {
	f := newFixture(t)
	for _, uid := range []string{"", "..", "a/b"} {
		pod := basePod()
		pod.UID = types.UID(uid)
		if _, err := f.mgr.MountPod(context.Background(), pod); err == nil {
			t.Errorf("uid %q accepted", uid)
		}
		if err := f.mgr.UnmountPod(context.Background(), pod.UID); err == nil {
			t.Errorf("unmount of uid %q accepted", uid)
		}
	}
}
