package volume

import (
	"context"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
)

// fakeObjects serves configMaps and secrets from maps and counts reads.
type fakeObjects struct {
	mu         sync.Mutex
	configMaps map[string]*v1.ConfigMap
	secrets    map[string]*v1.Secret
	reads      int
}

func (f *fakeObjects) GetConfigMap(_ context.Context, ns, name string) (*v1.ConfigMap, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if cm, ok := f.configMaps[ns+"/"+name]; ok {
		return cm, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmap"}, name)
}

func (f *fakeObjects) GetSecret(_ context.Context, ns, name string) (*v1.Secret, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if s, ok := f.secrets[ns+"/"+name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secret"}, name)
}

func TestMountPodReadsObjectsThroughObjects(t *testing.T) {
	objects := &fakeObjects{
		configMaps: map[string]*v1.ConfigMap{"ns/app": configMap("app", map[string]string{"a": "1"})},
		secrets:    map[string]*v1.Secret{"ns/creds": secret("creds", map[string]string{"pw": "s3cret"})},
	}
	// The client holds other contents: reads must not go to it.
	client := fake.NewClientset(configMap("app", map[string]string{"a": "from-the-client"}))
	mgr, err := NewManager(Config{
		RootDir: t.TempDir(), Client: kubetest.Wrap(client), Objects: objects,
		HugePagesDir: t.TempDir(), mounter: &fakeMounter{},
	})
	if err != nil {
		t.Fatal(err)
	}
	pod := basePod(
		withVolume("cfg", v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "app"}}}),
		withVolume("sec", v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "creds"}}),
		withVolume("both", v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "app"}}},
			{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "creds"}}},
		}}}),
	)
	mounts, err := mgr.MountPod(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	if got := readVol(t, mounts["cfg"], "a"); got != "1" {
		t.Errorf("cfg/a = %q, want 1 from Objects", got)
	}
	if got := readVol(t, mounts["both"], "pw"); got != "s3cret" {
		t.Errorf("both/pw = %q, want s3cret", got)
	}
	if objects.reads != 4 {
		t.Errorf("%d reads through Objects, want 4", objects.reads)
	}
	for _, a := range client.Actions() {
		t.Errorf("the client was asked: %s %s", a.GetVerb(), a.GetResource().Resource)
	}

	// A missing object reads as it did with GETs.
	missing := basePod(withVolume("gone", v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}}}))
	missing.UID = "uid-2"
	_, err = mgr.MountPod(context.Background(), missing)
	if want := `MountVolume.SetUp failed for volume "gone" : configmap "nope" not found`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("MountPod with a missing configMap = %v, want %q", err, want)
	}
}
