package volume

import (
	"fmt"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testclock "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
)

// fakeMounter keeps a mount table in memory; nothing is mounted.
type fakeMounter struct {
	mu     sync.Mutex
	table  []mountPoint
	mounts []string // "fstype target data" of every mount call
	failOn string   // mount of this target fails
	// blockOn's mount waits for release: a slow volume.
	blockOn string
	entered chan struct{}
	release chan struct{}
}

func (f *fakeMounter) mount(source, target, fstype string, _ uintptr, data string) error {
	if f.blockOn != "" && target == f.blockOn {
		f.entered <- struct{}{}
		<-f.release
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if target == f.failOn {
		return fmt.Errorf("injected mount failure")
	}
	f.table = append(f.table, mountPoint{path: target, fstype: fstype, source: source, superOpts: data})
	f.mounts = append(f.mounts, fmt.Sprintf("%s %s %s", fstype, target, data))
	return nil
}

func (f *fakeMounter) unmount(target string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.table) - 1; i >= 0; i-- {
		if f.table[i].path == target {
			f.table = append(f.table[:i], f.table[i+1:]...)
			return nil
		}
	}
	return nil
}

func (f *fakeMounter) mountedAt(dir string) (string, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	mp, ok := findMount(f.table, dir)
	return mp.fstype, ok, nil
}

func (f *fakeMounter) mountPoints(under string) ([]mountPoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []mountPoint
	for _, mp := range f.table {
		if under == "" || isAtOrBelow(mp.path, under) {
			out = append(out, mp)
		}
	}
	return out, nil
}

// tokenReactor answers TokenRequests with a numbered token valid for the
// requested time and records the requests.
type tokenReactor struct {
	mu       sync.Mutex
	clock    *testclock.FakeClock
	requests []*authenticationv1.TokenRequest
	fail     error
	// failNext answers the next requests, one error each, before fail.
	failNext []error
	attempts int
	// refusedPods are the pods (bound object UIDs) of the refused requests.
	refusedPods []string
	// refuse, when set, answers first: a non-nil error refuses the request
	// for the pod (bound object UID) it names.
	refuse func(uid string) error
}

func (r *tokenReactor) react(action k8stesting.Action) (bool, runtime.Object, error) {
	if action.GetSubresource() != "token" {
		return false, nil, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts++
	if r.refuse != nil {
		if ref := action.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenRequest).Spec.BoundObjectRef; ref != nil {
			if err := r.refuse(string(ref.UID)); err != nil {
				r.refusedPods = append(r.refusedPods, string(ref.UID))
				return true, nil, err
			}
		}
	}
	if len(r.failNext) > 0 {
		err := r.failNext[0]
		r.failNext = r.failNext[1:]
		if ref := action.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenRequest).Spec.BoundObjectRef; ref != nil {
			r.refusedPods = append(r.refusedPods, string(ref.UID))
		}
		return true, nil, err
	}
	if r.fail != nil {
		return true, nil, r.fail
	}
	tr := action.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenRequest).DeepCopy()
	r.requests = append(r.requests, tr)
	exp := time.Duration(*tr.Spec.ExpirationSeconds) * time.Second
	tr.Status = authenticationv1.TokenRequestStatus{
		Token:               fmt.Sprintf("token-%d", len(r.requests)),
		ExpirationTimestamp: metav1.NewTime(r.clock.Now().Add(exp)),
	}
	return true, tr, nil
}

func (r *tokenReactor) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.requests)
}

type fixture struct {
	mgr     *Manager
	client  *fake.Clientset
	mounter *fakeMounter
	clock   *testclock.FakeClock
	tokens  *tokenReactor
	root    string
}

func newFixture(t *testing.T, objects ...runtime.Object) *fixture {
	t.Helper()
	clk := testclock.NewFakeClock(time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC))
	client := fake.NewClientset(objects...)
	tr := &tokenReactor{clock: clk}
	client.PrependReactor("create", "serviceaccounts", tr.react)
	fm := &fakeMounter{}
	root := t.TempDir()
	mgr, err := NewManager(Config{
		RootDir:  root,
		Client:   kubetest.Wrap(client),
		NodeName: "node-a",
		Clock:    clk,
		Allocatable: func() v1.ResourceList {
			return v1.ResourceList{
				v1.ResourceCPU:    mustQ("4"),
				v1.ResourceMemory: mustQ("8Gi"),
			}
		},
		HugePagesDir: t.TempDir(),
		mounter:      fm,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{mgr: mgr, client: client, mounter: fm, clock: clk, tokens: tr, root: mgr.layout.Root()}
}

// basePod is the fixture's pod; tests add volumes with mutators.
func basePod(mut ...func(*v1.Pod)) *v1.Pod {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "ns", UID: types.UID("uid-1"),
			Labels:      map[string]string{"app": "web", "tier": "front"},
			Annotations: map[string]string{"note": "a \"quoted\" value"},
		},
		Spec: v1.PodSpec{
			ServiceAccountName: "builder",
			Containers: []v1.Container{{
				Name: "c",
				Resources: v1.ResourceRequirements{
					Requests: v1.ResourceList{v1.ResourceCPU: mustQ("250m"), v1.ResourceMemory: mustQ("64Mi")},
					Limits:   v1.ResourceList{v1.ResourceMemory: mustQ("128Mi")},
				},
			}},
		},
	}
	for _, m := range mut {
		m(pod)
	}
	return pod
}

func withVolume(name string, src v1.VolumeSource) func(*v1.Pod) {
	return func(p *v1.Pod) { p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: name, VolumeSource: src}) }
}

func ptr[T any](v T) *T { return &v }

func mustQ(s string) resource.Quantity { return resource.MustParse(s) }
