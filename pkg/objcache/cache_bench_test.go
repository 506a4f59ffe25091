package objcache

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
)

// benchPods is how many pods of the node reference the same objects.
const benchPods = 100

// rootCA is the configMap every namespace holds for its service accounts' tokens: one
// certificate of about 1.1 kB, as a cluster's CA is.
func rootCA() *v1.ConfigMap {
	pem := "-----BEGIN CERTIFICATE-----\n" + strings.Repeat(strings.Repeat("A", 64)+"\n", 17) + "-----END CERTIFICATE-----\n"
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": pem}}
}

// benchPod is the i-th pod of a deployment: the service account's projected volume
// (kube-root-ca.crt), an environment from a shared configMap, and a pull secret.
func benchPod(i int) *v1.Pod {
	pod := basePod()
	pod.UID, pod.Name = types.UID(fmt.Sprintf("uid-%03d", i)), fmt.Sprintf("p-%03d", i)
	expiry := int64(3607)
	pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "regcred"}}
	pod.Spec.Volumes = []v1.Volume{{Name: "kube-api-access-x7k2p", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		Sources: []v1.VolumeProjection{
			{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &expiry}},
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items: []v1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{
				{Path: "namespace", FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		}}}}}
	pod.Spec.Containers[0].EnvFrom = []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "app-config"}}}}
	return pod
}

// runningCache returns a Cache over client, running until the benchmark ends.
func runningCache(b *testing.B, client *fake.Clientset) *Cache {
	b.Helper()
	c, err := New(Config{Client: kubetest.Wrap(client), SyncWait: waitFor})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Run: %v", err)
		}
	})
	return c
}

// gets counts the GETs the fake served: reads that did not come from a watch.
func gets(client *fake.Clientset) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "get" {
			n++
		}
	}
	return n
}

// BenchmarkGetConfigMap is one read of a configMap a registered pod references, served
// from its watch: what a pod's volume refresh pays for kube-root-ca.crt.
func BenchmarkGetConfigMap(b *testing.B) {
	client := fake.NewClientset(rootCA())
	c := runningCache(b, client)
	c.Register(benchPod(0))
	ctx := context.Background()
	want := rootCA().Data["ca.crt"]
	// The first read waits for the watch's first list.
	if cm, err := c.GetConfigMap(ctx, "ns", "kube-root-ca.crt"); err != nil || cm.Data["ca.crt"] != want {
		b.Fatalf("GetConfigMap = %v, %v", cm, err)
	}
	if n := gets(client); n != 0 {
		b.Fatalf("%d GETs: the read did not come from the watch", n)
	}
	b.ReportAllocs()
	var cm *v1.ConfigMap
	for b.Loop() {
		var err error
		if cm, err = c.GetConfigMap(ctx, "ns", "kube-root-ca.crt"); err != nil {
			b.Fatal(err)
		}
	}
	if cm.Data["ca.crt"] != want || gets(client) != 0 {
		b.Fatalf("last read %v, %d GETs: want the watch's copy and no GET", cm.Data, gets(client))
	}
}

// sharedReferences returns a running Cache with benchPods pods registered, each
// referencing the same three objects, whose watches have listed; and the pods.
func sharedReferences(b *testing.B) (*Cache, []*v1.Pod) {
	b.Helper()
	client := fake.NewClientset(rootCA(), configMap("app-config", "v"), secret("regcred", "v"))
	c := runningCache(b, client)
	pods := make([]*v1.Pod, benchPods)
	for i := range pods {
		pods[i] = benchPod(i)
		c.Register(pods[i])
	}
	// Reads wait for the watches' first lists: nothing is left starting up.
	ctx := context.Background()
	for _, name := range []string{"kube-root-ca.crt", "app-config"} {
		if _, err := c.GetConfigMap(ctx, "ns", name); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := c.GetSecret(ctx, "ns", "regcred"); err != nil {
		b.Fatal(err)
	}
	if n := gets(client); n != 0 {
		b.Fatalf("%d GETs: the watches did not list", n)
	}
	return c, pods
}

// watched returns the objects the cache watches, checking that each has every pod as
// a user.
func watched(b *testing.B, c *Cache) map[objectKey]*watchedObject {
	b.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.objects) != 3 || len(c.pods) != benchPods {
		b.Fatalf("%d objects for %d pods, want 3 for %d", len(c.objects), len(c.pods), benchPods)
	}
	out := map[objectKey]*watchedObject{}
	for key, obj := range c.objects {
		if obj.users != benchPods || obj.stop == nil {
			b.Fatalf("%v: %d users, watched %t; want %d, watched", key, obj.users, obj.stop != nil, benchPods)
		}
		out[key] = obj
	}
	return out
}

// sameWatches fails unless the cache watches the objects of before, with the same
// watches: none was stopped and started again.
func sameWatches(b *testing.B, c *Cache, before map[objectKey]*watchedObject) {
	b.Helper()
	for key, obj := range watched(b, c) {
		if before[key] != obj {
			b.Fatalf("%v: its watch was replaced", key)
		}
	}
}

// BenchmarkRegisterAgain is the registration of a pod already registered, its spec
// unchanged, among 100 pods referencing the same three objects: what every pod's
// volume refresh pays (the agent's MountPod registers first).
func BenchmarkRegisterAgain(b *testing.B) {
	c, pods := sharedReferences(b)
	before := watched(b, c)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.Register(pods[i%len(pods)])
	}
	sameWatches(b, c, before)
}

// BenchmarkRegisterUnregister is one of 100 pods referencing the same three objects
// (kube-root-ca.crt, an env configMap, a pull secret) going and coming back: Unregister,
// then Register. The other 99 hold the watches, so none stops or starts.
func BenchmarkRegisterUnregister(b *testing.B) {
	c, pods := sharedReferences(b)
	before := watched(b, c)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		pod := pods[i%len(pods)]
		c.Unregister(pod.UID)
		c.Register(pod)
	}
	sameWatches(b, c, before)
}
