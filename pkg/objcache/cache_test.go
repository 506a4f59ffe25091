package objcache

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
)

// waitFor is how long a test waits for something the watch delivers.
const waitFor = 5 * time.Second

// fixture is a Cache over a fake clientset whose watches are recorded.
// The fake ignores field selectors: a watch sees its whole namespace,
// which the cache must filter down to the object it asked for.
type fixture struct {
	client *fake.Clientset
	cache  *Cache

	mu      sync.Mutex
	watches []*recordedWatch
}

// recordedWatch is a watch the fake opened, and whether it was stopped.
type recordedWatch struct {
	watch.Interface
	resource, namespace, selector string
	once                          sync.Once
	stopped                       chan struct{}
}

func (w *recordedWatch) Stop() {
	w.once.Do(func() { close(w.stopped) })
	w.Interface.Stop()
}

func (w *recordedWatch) isStopped() bool {
	select {
	case <-w.stopped:
		return true
	default:
		return false
	}
}

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{client: fake.NewClientset(objs...)}
	f.client.PrependWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		wa := action.(k8stesting.WatchActionImpl)
		w, err := f.client.Tracker().Watch(action.GetResource(), action.GetNamespace(), wa.ListOptions)
		if err != nil {
			return true, nil, err
		}
		rec := &recordedWatch{
			Interface: w, resource: action.GetResource().Resource, namespace: action.GetNamespace(),
			selector: wa.ListOptions.FieldSelector, stopped: make(chan struct{}),
		}
		f.mu.Lock()
		f.watches = append(f.watches, rec)
		f.mu.Unlock()
		return true, rec, nil
	})
	c, err := New(Config{Client: kubetest.Wrap(f.client), SyncWait: waitFor})
	if err != nil {
		t.Fatal(err)
	}
	f.cache = c
	return f
}

// run starts the cache until the test ends.
func (f *fixture) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f.cache.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// watchOf waits for the watch of the object named by selector to open.
func (f *fixture) watchOf(t *testing.T, resource, name string) *recordedWatch {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for time.Now().Before(deadline) {
		f.mu.Lock()
		for _, w := range f.watches {
			if w.resource == resource && w.selector == "metadata.name="+name && !w.isStopped() {
				f.mu.Unlock()
				return w
			}
		}
		f.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no open watch of %s %q", resource, name)
	return nil
}

func (f *fixture) openWatches() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, w := range f.watches {
		if !w.isStopped() {
			n++
		}
	}
	return n
}

// count counts the requests of verb on resource the fake saw.
func (f *fixture) count(verb, resource string) int {
	n := 0
	for _, a := range f.client.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func configMap(name, value string) *v1.ConfigMap {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string]string{"k": value}}
}

func secret(name, value string) *v1.Secret {
	return &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string][]byte{"k": []byte(value)}}
}

// podWith returns a pod whose volumes project the configMaps and secrets.
func podWith(uid types.UID, configMaps, secrets []string) *v1.Pod {
	pod := basePod()
	pod.UID = uid
	for _, name := range configMaps {
		pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: "cm-" + name, VolumeSource: v1.VolumeSource{
			ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: name}}}})
	}
	for _, name := range secrets {
		pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: "sec-" + name, VolumeSource: v1.VolumeSource{
			Secret: &v1.SecretVolumeSource{SecretName: name}}})
	}
	return pod
}

func TestReadsComeFromTheWatch(t *testing.T) {
	f := newFixture(t, configMap("kube-root-ca.crt", "ca-1"), configMap("other", "x"))
	f.run(t)
	f.cache.Register(podWith("uid-1", []string{"kube-root-ca.crt"}, nil))

	for range 5 { // five volume refreshes
		cm, err := f.cache.GetConfigMap(t.Context(), "ns", "kube-root-ca.crt")
		if err != nil {
			t.Fatalf("GetConfigMap: %v", err)
		}
		if cm.Data["k"] != "ca-1" {
			t.Fatalf("GetConfigMap = %v, want ca-1", cm.Data)
		}
	}
	if got := f.count("get", "configmaps"); got != 0 {
		t.Errorf("%d GETs of configmaps, want none: reads come from the watch", got)
	}
	if got := f.count("list", "configmaps"); got != 1 {
		t.Errorf("%d LISTs of configmaps, want the watch's one", got)
	}
	w := f.watchOf(t, "configmaps", "kube-root-ca.crt")
	if w.namespace != "ns" {
		t.Errorf("watch in namespace %q, want ns", w.namespace)
	}

	// A change reaches readers through the watch.
	if _, err := f.client.CoreV1().ConfigMaps("ns").Update(t.Context(), configMap("kube-root-ca.crt", "ca-2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the update is served", func() bool {
		cm, err := f.cache.GetConfigMap(t.Context(), "ns", "kube-root-ca.crt")
		return err == nil && cm.Data["k"] == "ca-2"
	})
	// Another object of the namespace, seen by the fake's wide watch, is
	// not taken for it.
	if _, err := f.client.CoreV1().ConfigMaps("ns").Update(t.Context(), configMap("other", "y"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm, err := f.cache.GetConfigMap(t.Context(), "ns", "kube-root-ca.crt")
	if err != nil || cm.Data["k"] != "ca-2" {
		t.Errorf("GetConfigMap = %v, %v; want ca-2", cm, err)
	}
	if got := f.count("get", "configmaps"); got != 0 {
		t.Errorf("%d GETs of configmaps, want none", got)
	}
}

func TestReadersGetTheirOwnCopy(t *testing.T) {
	f := newFixture(t, secret("s", "v"))
	f.run(t)
	f.cache.Register(podWith("uid-1", nil, []string{"s"}))
	s, err := f.cache.GetSecret(t.Context(), "ns", "s")
	if err != nil {
		t.Fatal(err)
	}
	s.Data["k"] = []byte("scribbled")
	again, err := f.cache.GetSecret(t.Context(), "ns", "s")
	if err != nil || string(again.Data["k"]) != "v" {
		t.Errorf("GetSecret after a reader changed its copy = %q, %v; want v", again.Data["k"], err)
	}
}

func TestMissingObjects(t *testing.T) {
	f := newFixture(t)
	f.run(t)
	f.cache.Register(podWith("uid-1", []string{"cm"}, []string{"sec"}))

	_, err := f.cache.GetConfigMap(t.Context(), "ns", "cm")
	if !apierrors.IsNotFound(err) || err.Error() != `configmap "cm" not found` {
		t.Errorf("GetConfigMap of a missing configMap = %v, want NotFound `configmap \"cm\" not found`", err)
	}
	_, err = f.cache.GetSecret(t.Context(), "ns", "sec")
	if !apierrors.IsNotFound(err) || err.Error() != `secret "sec" not found` {
		t.Errorf("GetSecret of a missing secret = %v, want NotFound `secret \"sec\" not found`", err)
	}
	if got := f.count("get", "configmaps") + f.count("get", "secrets"); got != 0 {
		t.Errorf("%d GETs, want none: the watch's list says it is missing", got)
	}

	// Created later, it is served once the watch delivers it.
	f.watchOf(t, "configmaps", "cm")
	if _, err := f.client.CoreV1().ConfigMaps("ns").Create(t.Context(), configMap("cm", "late"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the created configMap is served", func() bool {
		cm, err := f.cache.GetConfigMap(t.Context(), "ns", "cm")
		return err == nil && cm.Data["k"] == "late"
	})
	// Deleted, it is missing again.
	if err := f.client.CoreV1().ConfigMaps("ns").Delete(t.Context(), "cm", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the deleted configMap is missing", func() bool {
		_, err := f.cache.GetConfigMap(t.Context(), "ns", "cm")
		return apierrors.IsNotFound(err)
	})
}

func TestImmutableObjectsAreNotWatchedAfterTheFirstRead(t *testing.T) {
	yes := true
	sec := secret("frozen", "v1")
	sec.Immutable = &yes
	f := newFixture(t, sec)
	f.run(t)
	f.cache.Register(podWith("uid-1", nil, []string{"frozen"}))

	w := f.watchOf(t, "secrets", "frozen")
	s, err := f.cache.GetSecret(t.Context(), "ns", "frozen")
	if err != nil || string(s.Data["k"]) != "v1" {
		t.Fatalf("GetSecret = %v, %v; want v1", s, err)
	}
	waitUntil(t, "the immutable secret's watch stops", w.isStopped)

	// The fake lets it change; the apiserver would not. The copy read
	// first is what is served, without asking again.
	changed := secret("frozen", "v2")
	changed.Immutable = &yes
	if _, err := f.client.CoreV1().Secrets("ns").Update(t.Context(), changed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A second pod referencing it starts no new watch.
	f.cache.Register(podWith("uid-2", nil, []string{"frozen"}))
	for range 3 {
		s, err := f.cache.GetSecret(t.Context(), "ns", "frozen")
		if err != nil || string(s.Data["k"]) != "v1" {
			t.Fatalf("GetSecret = %v, %v; want the first copy, v1", s, err)
		}
	}
	if got := f.count("get", "secrets"); got != 0 {
		t.Errorf("%d GETs of secrets, want none", got)
	}
	if got := f.count("watch", "secrets"); got != 1 {
		t.Errorf("%d watches of secrets, want 1", got)
	}
}

func TestWatchesStopWhenNoPodReferences(t *testing.T) {
	f := newFixture(t, configMap("shared", "v"), configMap("own", "v"))
	f.run(t)
	f.cache.Register(podWith("uid-1", []string{"shared", "own"}, nil))
	f.cache.Register(podWith("uid-2", []string{"shared"}, nil))
	shared := f.watchOf(t, "configmaps", "shared")
	own := f.watchOf(t, "configmaps", "own")
	if got := f.count("watch", "configmaps"); got != 2 {
		t.Errorf("%d watches for two objects, want one each", got)
	}

	f.cache.Unregister("uid-1")
	waitUntil(t, "the watch no pod needs stops", own.isStopped)
	if shared.isStopped() {
		t.Fatal("the watch of an object another pod references stopped")
	}
	f.cache.Unregister("uid-2")
	waitUntil(t, "the last watch stops", shared.isStopped)
	f.cache.Unregister("uid-unknown") // ignored

	// Read with nothing registered: a GET, as before the cache.
	cm, err := f.cache.GetConfigMap(t.Context(), "ns", "shared")
	if err != nil || cm.Data["k"] != "v" {
		t.Errorf("GetConfigMap of an unregistered object = %v, %v", cm, err)
	}
	if got := f.count("get", "configmaps"); got != 1 {
		t.Errorf("%d GETs, want 1 for the unregistered read", got)
	}
	_, err = f.cache.GetConfigMap(t.Context(), "ns", "nope")
	if !apierrors.IsNotFound(err) || err.Error() != `configmap "nope" not found` {
		t.Errorf("GetConfigMap of a missing unregistered object = %v, want `configmap \"nope\" not found`", err)
	}
}

func TestRegisterAgainFollowsTheSpec(t *testing.T) {
	f := newFixture(t, configMap("a", "v"), configMap("b", "v"))
	f.run(t)
	pod := podWith("uid-1", []string{"a"}, nil)
	f.cache.Register(pod)
	a := f.watchOf(t, "configmaps", "a")
	f.cache.Register(pod) // every volume refresh registers again
	if got := f.count("watch", "configmaps"); got != 1 {
		t.Errorf("%d watches after registering the same pod twice, want 1", got)
	}

	changed := podWith("uid-1", []string{"b"}, nil)
	f.cache.Register(changed)
	f.watchOf(t, "configmaps", "b")
	waitUntil(t, "the dropped reference's watch stops", a.isStopped)

	f.cache.Unregister("uid-1")
	waitUntil(t, "every watch stops", func() bool { return f.openWatches() == 0 })
}

func TestReadsBeforeTheWatchListedAreGETs(t *testing.T) {
	f := newFixture(t, configMap("cm", "v"))
	f.cache.syncWait = 10 * time.Millisecond
	// Not running: registered watches wait for Run.
	f.cache.Register(podWith("uid-1", []string{"cm"}, nil))
	cm, err := f.cache.GetConfigMap(t.Context(), "ns", "cm")
	if err != nil || cm.Data["k"] != "v" {
		t.Fatalf("GetConfigMap = %v, %v", cm, err)
	}
	if got := f.count("get", "configmaps"); got != 1 {
		t.Errorf("%d GETs, want 1", got)
	}
	if got := f.count("watch", "configmaps"); got != 0 {
		t.Errorf("%d watches before Run, want none", got)
	}

	// Run starts what was registered before it.
	f.run(t)
	f.watchOf(t, "configmaps", "cm")
	waitUntil(t, "reads come from the watch", func() bool {
		before := f.count("get", "configmaps")
		_, err := f.cache.GetConfigMap(t.Context(), "ns", "cm")
		return err == nil && f.count("get", "configmaps") == before
	})
}

func TestReadsAtOnceShareOneGET(t *testing.T) {
	f := newFixture(t, configMap("cm", "v"))
	f.cache.syncWait = 10 * time.Millisecond
	f.cache.Register(podWith("uid-1", []string{"cm"}, nil)) // never listed: no Run
	release := make(chan struct{})
	f.client.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		<-release
		return false, nil, nil // on to the fake's tracker
	})
	const readers = 20
	var joined sync.WaitGroup
	joined.Add(readers)
	f.cache.fetchJoined = joined.Done
	got := make(chan *v1.ConfigMap, readers)
	for range readers {
		go func() {
			cm, err := f.cache.GetConfigMap(t.Context(), "ns", "cm")
			if err != nil {
				t.Errorf("GetConfigMap: %v", err)
			}
			got <- cm
		}()
	}
	joined.Wait() // every read waits on a GET: the one in flight
	close(release)
	seen := map[*v1.ConfigMap]bool{}
	for range readers {
		cm := <-got
		if cm == nil || cm.Data["k"] != "v" {
			t.Fatalf("read %v", cm)
		}
		if seen[cm] {
			t.Fatal("two readers were given the same object")
		}
		seen[cm] = true
	}
	if n := f.count("get", "configmaps"); n != 1 {
		t.Errorf("%d GETs for %d reads at once, want 1", n, readers)
	}
}

func TestReadGivesUpWithItsContext(t *testing.T) {
	f := newFixture(t, configMap("cm", "v"))
	f.cache.Register(podWith("uid-1", []string{"cm"}, nil)) // never listed: no Run
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := f.cache.GetConfigMap(ctx, "ns", "cm"); err == nil {
		t.Error("GetConfigMap with an ended context succeeded")
	}
}

func TestRunStopsEveryWatch(t *testing.T) {
	f := newFixture(t, configMap("a", "v"), secret("b", "v"))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f.cache.Run(ctx) }()
	f.cache.Register(podWith("uid-1", []string{"a"}, []string{"b"}))
	f.watchOf(t, "configmaps", "a")
	f.watchOf(t, "secrets", "b")
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(waitFor):
		t.Fatal("Run did not return after its context ended")
	}
	if n := f.openWatches(); n != 0 {
		t.Errorf("%d watches open after Run returned", n)
	}
	// Registering after the end starts nothing.
	f.cache.Register(podWith("uid-2", []string{"c"}, nil))
	if got := f.count("watch", "configmaps"); got != 1 {
		t.Errorf("%d configmap watches, want the one from before the end", got)
	}
	if err := f.cache.Run(t.Context()); err == nil {
		t.Error("a second Run succeeded")
	}
}

func TestNewNeedsAClient(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New without a Client succeeded")
	}
}
