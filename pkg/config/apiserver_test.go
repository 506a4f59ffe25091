package config

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
)

const (
	testNode = "node-a"
	// testTimeout bounds every wait for the informer; it is never reached
	// when the source works.
	testTimeout = 10 * time.Second
)

// event is one call the source made on its handler.
type event struct {
	op      string // "upsert" or "remove"
	name    string
	version string // the pod's "v" label, to tell an update from the add
}

// recordingHandler records every call; gate, when set, holds each call
// until the test lets it go.
type recordingHandler struct {
	events chan event
	gate   chan struct{}
}

var _ Handler = (*recordingHandler)(nil)

func newRecordingHandler() *recordingHandler {
	return &recordingHandler{events: make(chan event, 100)}
}

func (h *recordingHandler) UpsertPod(pod *v1.Pod) { h.record("upsert", pod) }
func (h *recordingHandler) RemovePod(pod *v1.Pod) { h.record("remove", pod) }

func (h *recordingHandler) record(op string, pod *v1.Pod) {
	h.events <- event{op: op, name: pod.Name, version: pod.Labels["v"]}
	if h.gate != nil {
		<-h.gate
	}
}

// next waits for the handler's next call.
func (h *recordingHandler) next(t *testing.T) event {
	t.Helper()
	select {
	case e := <-h.events:
		return e
	case <-time.After(testTimeout):
		t.Fatal("the handler was not called")
		return event{}
	}
}

// none checks the handler has no call waiting.
func (h *recordingHandler) none(t *testing.T) {
	t.Helper()
	select {
	case e := <-h.events:
		t.Fatalf("unexpected handler call %+v", e)
	default:
	}
}

func pod(name, version string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), Labels: map[string]string{"v": version}},
		Spec:       v1.PodSpec{NodeName: testNode},
	}
}

// started is a running source, stopped at the end of the test.
type started struct {
	src    *APISource
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, client *fake.Clientset, h Handler) *started {
	t.Helper()
	src, err := NewAPISource(Config{Client: kubetest.Wrap(client), NodeName: testNode})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.SetHandler(h); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &started{src: src, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- src.Run(ctx) }()
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop ends the source's context and waits for Run to return.
func (s *started) stop(t *testing.T) {
	t.Helper()
	s.cancel()
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
		s.done <- nil // a second stop returns at once
	case <-time.After(testTimeout):
		t.Fatal("Run did not return after its context ended")
	}
}

// eventually waits for cond, polling.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPodChangesReachTheHandler(t *testing.T) {
	client := fake.NewClientset(pod("listed", "1"))
	h := newRecordingHandler()
	s := start(t, client, h)
	if got := h.next(t); got != (event{"upsert", "listed", "1"}) {
		t.Fatalf("first call %+v, want the listed pod's upsert", got)
	}
	eventually(t, "the source has synced", s.src.HasSynced)
	waitForWatch(t, client)

	ctx := context.Background()
	pods := client.CoreV1().Pods("default")
	if _, err := pods.Create(ctx, pod("added", "1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := h.next(t); got != (event{"upsert", "added", "1"}) {
		t.Fatalf("after create: %+v", got)
	}
	if _, err := pods.Update(ctx, pod("added", "2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := h.next(t); got != (event{"upsert", "added", "2"}) {
		t.Fatalf("after update: %+v, want the new spec", got)
	}
	if err := pods.Delete(ctx, "added", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := h.next(t); got != (event{"remove", "added", "2"}) {
		t.Fatalf("after delete: %+v", got)
	}
	h.none(t)
}

// The source relies on the apiserver to filter by node (the fake
// clientset applies no field selector), so what can be checked here is
// that every list and watch of pods asks for this node's pods only.
func TestOnlyThisNodesPodsAreRequested(t *testing.T) {
	client := fake.NewClientset()
	s := start(t, client, newRecordingHandler())
	eventually(t, "the source has synced", s.src.HasSynced)
	waitForWatch(t, client)

	var lists, watches int
	for _, a := range client.Actions() {
		if a.GetResource().Resource != "pods" {
			continue
		}
		var selector string
		switch a := a.(type) {
		case k8stesting.ListAction:
			lists++
			selector = a.GetListRestrictions().Fields.String()
		case k8stesting.WatchAction:
			watches++
			selector = a.GetWatchRestrictions().Fields.String()
		default:
			t.Errorf("unexpected %s of pods", a.GetVerb())
			continue
		}
		if want := "spec.nodeName=" + testNode; selector != want {
			t.Errorf("%s of pods with field selector %q, want %q", a.GetVerb(), selector, want)
		}
		if a.GetNamespace() != "" {
			t.Errorf("%s of pods in namespace %q, want all namespaces", a.GetVerb(), a.GetNamespace())
		}
	}
	if lists == 0 || watches == 0 {
		t.Errorf("%d lists and %d watches of pods, want both", lists, watches)
	}
}

func waitForWatch(t *testing.T, client *fake.Clientset) {
	t.Helper()
	eventually(t, "the pods are watched", func() bool {
		for _, a := range client.Actions() {
			if a.GetVerb() == "watch" && a.GetResource().Resource == "pods" {
				return true
			}
		}
		return false
	})
}

// HasSynced turns true only once the handler has been given every pod of
// the first list, not when the informer's store has them: the dispatcher
// takes an unknown pod in the runtime for an orphan from then on.
func TestHasSyncedWaitsForTheHandler(t *testing.T) {
	client := fake.NewClientset(pod("a", "1"), pod("b", "1"))
	h := newRecordingHandler()
	h.gate = make(chan struct{})
	src, err := NewAPISource(Config{Client: kubetest.Wrap(client), NodeName: testNode})
	if err != nil {
		t.Fatal(err)
	}
	if src.HasSynced() {
		t.Fatal("HasSynced before SetHandler")
	}
	if err := src.SetHandler(h); err != nil {
		t.Fatal(err)
	}
	if src.HasSynced() {
		t.Fatal("HasSynced before Run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	defer close(h.gate) // first, so that Run can stop however the test ends

	h.next(t) // the handler holds the first pod
	if !cache.WaitForCacheSync(ctx.Done(), src.informer.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	if src.HasSynced() {
		t.Fatal("HasSynced while the handler has not been given the second pod")
	}
	h.gate <- struct{}{}
	h.next(t) // the second pod
	if src.HasSynced() {
		t.Fatal("HasSynced while the handler still holds the second pod")
	}
	h.gate <- struct{}{}
	eventually(t, "the source has synced", src.HasSynced)
}

// Run returns, with no error, once its context ends: stop fails the test
// otherwise.
func TestRunStopsWithItsContext(t *testing.T) {
	s := start(t, fake.NewClientset(pod("a", "1")), newRecordingHandler())
	eventually(t, "the source has synced", s.src.HasSynced)
	s.stop(t)
}

func TestHandlerDispatch(t *testing.T) {
	p := pod("a", "1")
	tests := []struct {
		name string
		call func(Handler)
		want []event
	}{
		{name: "pod added", call: func(h Handler) { upsert(h, p) }, want: []event{{"upsert", "a", "1"}}},
		{name: "pod deleted", call: func(h Handler) { remove(h, p) }, want: []event{{"remove", "a", "1"}}},
		{name: "deletion the watch missed", call: func(h Handler) {
			remove(h, cache.DeletedFinalStateUnknown{Key: "default/a", Obj: p})
		}, want: []event{{"remove", "a", "1"}}},
		{name: "not a pod", call: func(h Handler) {
			upsert(h, &v1.Node{})
			remove(h, &v1.Node{})
			remove(h, cache.DeletedFinalStateUnknown{Key: "x", Obj: &v1.Node{}})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newRecordingHandler()
			tt.call(h)
			for _, want := range tt.want {
				if got := h.next(t); got != want {
					t.Errorf("got %+v, want %+v", got, want)
				}
			}
			h.none(t)
		})
	}
}

func TestSetHandlerBeforeRunOnly(t *testing.T) {
	newSource := func(t *testing.T) *APISource {
		src, err := NewAPISource(Config{Client: kubetest.Wrap(fake.NewClientset()), NodeName: testNode})
		if err != nil {
			t.Fatal(err)
		}
		return src
	}
	tests := []struct {
		name    string
		do      func(*APISource) error
		wantErr string
	}{
		{name: "nil handler", do: func(s *APISource) error { return s.SetHandler(nil) }, wantErr: "nil handler"},
		{name: "twice", do: func(s *APISource) error {
			if err := s.SetHandler(newRecordingHandler()); err != nil {
				return err
			}
			return s.SetHandler(newRecordingHandler())
		}, wantErr: "called twice"},
		{name: "Run without handler", do: func(s *APISource) error { return s.Run(context.Background()) }, wantErr: "Run before SetHandler"},
		{name: "after Run", do: func(s *APISource) error {
			_ = s.Run(context.Background())
			return s.SetHandler(newRecordingHandler())
		}, wantErr: "after Run"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.do(newSource(t))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
}

func TestNewAPISourceRequiresClientAndNode(t *testing.T) {
	for _, cfg := range []Config{{NodeName: testNode}, {Client: kubetest.Wrap(fake.NewClientset())}} {
		if _, err := NewAPISource(cfg); err == nil {
			t.Errorf("NewAPISource(%+v) succeeded", cfg)
		}
	}
}

func TestMirrorPodsAreNotRun(t *testing.T) {
	mirror := pod("mirrored", "1")
	mirror.Annotations = map[string]string{AnnotationMirror: "hash", AnnotationSource: SourceFile}
	client := fake.NewClientset(pod("plain", "1"), mirror)
	src, err := NewAPISource(Config{Client: kubetest.Wrap(client), NodeName: testNode})
	if err != nil {
		t.Fatal(err)
	}
	h, mirrors := newRecordingHandler(), newRecordingHandler()
	if err := src.SetHandler(h); err != nil {
		t.Fatal(err)
	}
	if err := src.SetMirrorHandler(mirrors); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	defer func() { cancel(); <-done }()

	if got := h.next(t); got.name != "plain" {
		t.Fatalf("the pod handler got %+v", got)
	}
	if got := mirrors.next(t); got != (event{"upsert", "mirrored", "1"}) {
		t.Fatalf("the mirror handler got %+v", got)
	}
	eventually(t, "the source has synced", src.HasSynced)
	// A deletion made before the informer's watch starts would be missed
	// by the fake clientset.
	waitForWatch(t, client)
	if got := src.MirrorPods(); len(got) != 1 || got[0].Name != "mirrored" {
		t.Errorf("MirrorPods = %v", got)
	}
	if err := client.CoreV1().Pods("default").Delete(ctx, "mirrored", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := mirrors.next(t); got.op != "remove" {
		t.Errorf("the mirror handler got %+v", got)
	}
	h.none(t)
}
