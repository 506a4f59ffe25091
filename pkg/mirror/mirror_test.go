package mirror

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodeagent/nodeagent/pkg/config"
	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
)

const nodeName = "n1"

func static(name, hash string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", UID: types.UID(hash), Annotations: map[string]string{
			config.AnnotationSource: config.SourceFile, config.AnnotationHash: hash, config.AnnotationSeen: "2026-11-25T07:00:00Z"}},
		Spec:   v1.PodSpec{NodeName: nodeName, Containers: []v1.Container{{Name: "c", Image: "i"}}},
		Status: v1.PodStatus{Phase: v1.PodPending},
	}
}

func mirrorPod(name, hash, uid string) *v1.Pod {
	m := mirrorOf(static(name, hash), nodeName, "node-uid")
	m.UID = types.UID(uid)
	return m
}

func deleting(p *v1.Pod) *v1.Pod {
	now := metav1.Now()
	p.DeletionTimestamp = &now
	return p
}

func describe(actions []action) string {
	var out []string
	for _, a := range actions {
		if a.create != nil {
			out = append(out, "create "+a.name()+" "+hashOf(a.create))
		} else {
			out = append(out, "delete "+a.name()+" "+string(a.deleteUID))
		}
	}
	return strings.Join(out, "; ")
}

func TestPlan(t *testing.T) {
	tests := []struct {
		name     string
		static   []*v1.Pod
		mirrors  []*v1.Pod
		stopping []string
		want     string
	}{
		{name: "nothing", want: ""},
		{name: "a static pod without a mirror", static: []*v1.Pod{static("a", "h1")}, want: "create kube-system/a h1"},
		{name: "in step", static: []*v1.Pod{static("a", "h1")}, mirrors: []*v1.Pod{mirrorPod("a", "h1", "m1")}, want: ""},
		{name: "the file changed", static: []*v1.Pod{static("a", "h2")}, mirrors: []*v1.Pod{mirrorPod("a", "h1", "m1")},
			want: "delete kube-system/a m1; create kube-system/a h2"},
		{name: "the mirror is being deleted", static: []*v1.Pod{static("a", "h1")}, mirrors: []*v1.Pod{deleting(mirrorPod("a", "h1", "m1"))},
			want: "delete kube-system/a m1; create kube-system/a h1"},
		{name: "the file is gone", mirrors: []*v1.Pod{mirrorPod("a", "h1", "m1")}, want: "delete kube-system/a m1"},
		{name: "the file is gone but the pod still stops", mirrors: []*v1.Pod{mirrorPod("a", "h1", "m1")}, stopping: []string{"kube-system/a"}, want: ""},
		{name: "several, in name order", static: []*v1.Pod{static("c", "h3"), static("b", "h2")},
			mirrors: []*v1.Pod{mirrorPod("z", "h9", "m9"), mirrorPod("b", "h2", "m2")},
			want:    "delete kube-system/z m9; create kube-system/c h3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			running := func(ns, name string) bool {
				for _, s := range tt.stopping {
					if s == ns+"/"+name {
						return true
					}
				}
				return false
			}
			if got := describe(plan(tt.static, tt.mirrors, running)); got != tt.want {
				t.Errorf("plan = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestMirrorOf(t *testing.T) {
	s := static("a", "h1")
	m := mirrorOf(s, nodeName, "node-uid")
	if m.Annotations[config.AnnotationMirror] != "h1" || m.Annotations[config.AnnotationSource] != "file" || m.Annotations[config.AnnotationHash] != "h1" {
		t.Errorf("annotations %v", m.Annotations)
	}
	if _, ok := s.Annotations[config.AnnotationMirror]; ok {
		t.Error("the static pod was changed")
	}
	if m.UID != "" || m.Status.Phase != "" {
		t.Errorf("uid %q status %+v carried over", m.UID, m.Status)
	}
	want := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: nodeName, UID: "node-uid"}
	if len(m.OwnerReferences) != 1 || m.OwnerReferences[0].Controller == nil || !*m.OwnerReferences[0].Controller {
		t.Fatalf("owner references %+v", m.OwnerReferences)
	}
	got := m.OwnerReferences[0]
	got.Controller = nil
	if got != want {
		t.Errorf("owner %+v, want %+v", got, want)
	}
}

// fixture is a controller over a fake clientset whose static pods the
// test sets and whose mirror pods are the clientset's.
type fixture struct {
	client *fake.Clientset
	static []*v1.Pod
	c      *Controller
}

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	t.Helper()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}}
	f := &fixture{client: fake.NewClientset(append(objs, node)...)}
	c, err := New(Config{
		Client: kubetest.Wrap(f.client), NodeName: nodeName,
		StaticPods: func() []*v1.Pod { return f.static },
		MirrorPods: func() []*v1.Pod {
			list, err := f.client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var out []*v1.Pod
			for i := range list.Items {
				if config.IsMirror(&list.Items[i]) {
					out = append(out, &list.Items[i])
				}
			}
			return out
		},
		Listed: func() bool { return true },
	})
	if err != nil {
		t.Fatal(err)
	}
	f.c = c
	return f
}

func (f *fixture) mirrors(t *testing.T) map[string]*v1.Pod {
	t.Helper()
	out := map[string]*v1.Pod{}
	for _, p := range f.c.cfg.MirrorPods() {
		out[p.Name] = p
	}
	return out
}

func TestControllerKeepsMirrors(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.static = []*v1.Pod{static("a", "h1")}
	if err := f.c.pass(ctx); err != nil {
		t.Fatal(err)
	}
	m := f.mirrors(t)["a"]
	if m == nil || m.Annotations[config.AnnotationMirror] != "h1" || m.OwnerReferences[0].UID != "node-uid" {
		t.Fatalf("mirror after the first pass: %+v", m)
	}

	// The file changes: the old mirror goes, one of the new hash comes.
	f.static = []*v1.Pod{static("a", "h2")}
	if err := f.c.pass(ctx); err != nil {
		t.Fatal(err)
	}
	if m := f.mirrors(t)["a"]; m == nil || m.Annotations[config.AnnotationMirror] != "h2" {
		t.Fatalf("mirror after the change: %+v", m)
	}
	var deletes int
	for _, a := range f.client.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok {
			deletes++
			opts := d.GetDeleteOptions()
			if opts.GracePeriodSeconds == nil || *opts.GracePeriodSeconds != 0 || opts.Preconditions == nil || opts.Preconditions.UID == nil {
				t.Errorf("delete without grace 0 and a UID precondition: %+v", opts)
			}
		}
	}
	if deletes != 1 {
		t.Errorf("%d deletions, want 1", deletes)
	}

	// The file is removed: the mirror goes.
	f.static = nil
	if err := f.c.pass(ctx); err != nil {
		t.Fatal(err)
	}
	if len(f.mirrors(t)) != 0 {
		t.Errorf("mirrors left: %v", f.mirrors(t))
	}
}

func TestControllerWithoutNodeOrApiserver(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.static = []*v1.Pod{static("a", "h1")}
	f.client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	if err := f.c.pass(ctx); err == nil || !strings.Contains(err.Error(), "get node") {
		t.Errorf("pass = %v, want the node's error", err)
	}
	if len(f.mirrors(t)) != 0 {
		t.Error("a mirror pod was made without the node's UID")
	}

	g := newFixture(t)
	g.static = []*v1.Pod{static("a", "h1")}
	g.c.cfg.Listed = func() bool { return false }
	if err := g.c.pass(ctx); err != nil || len(g.client.Actions()) != 0 {
		t.Errorf("acted before the mirror pods were listed: %v %v", err, g.client.Actions())
	}
}

func TestControllerRunWakes(t *testing.T) {
	f := newFixture(t)
	f.c.cfg.Resync = 1 << 40 // only wake-ups make passes
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- f.c.Run(ctx) }()
	f.c.UpsertPod(nil)
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
}

// With no static and no mirror pod, passes wait for the sources' wake-ups
// (and a minute); anything to keep, a list not complete or a failed pass
// brings back the resync.
func TestControllerResyncsOnlyWithWorkToKeep(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	passed := func() {
		t.Helper()
		if err := f.c.pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	passed()
	if got := f.c.nextPass(nil); got != idleResync {
		t.Errorf("idle node: next pass in %v, want %v", got, idleResync)
	}
	if got := f.c.nextPass(errors.New("get node: connection refused")); got != DefaultResync {
		t.Errorf("after a failed pass: next in %v, want %v", got, DefaultResync)
	}
	f.static = []*v1.Pod{static("a", "h1")}
	passed()
	if got := f.c.nextPass(nil); got != DefaultResync {
		t.Errorf("with a static pod: next pass in %v, want %v", got, DefaultResync)
	}
	f.static = nil
	f.c.cfg.Listed = func() bool { return false }
	passed()
	if got := f.c.nextPass(nil); got != DefaultResync {
		t.Errorf("lists not complete: next pass in %v, want %v", got, DefaultResync)
	}
}
