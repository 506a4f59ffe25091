package status

import (
	"context"
	"errors"
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
)

// A status write merges with the watch's copy of the pod when that copy
// holds the agent's last write, with what its last write returned when the
// watch lags behind it (merging with a copy older than its own write would
// leave the apiserver's container state half old, half new), and GETs the
// pod when neither will do.
func TestManagerMergesWithCachedPodUnlessItLags(t *testing.T) {
	p := pod(v1.RestartPolicyAlways)
	client := fake.NewClientset(p)
	pods := v1.SchemeGroupVersion.WithResource("pods")
	// The apiserver's resourceVersions, which the fake does not keep.
	version := 1
	client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		_, obj, err := k8stesting.ObjectReaction(client.Tracker())(a)
		if err != nil {
			return true, nil, err
		}
		version++
		written := obj.(*v1.Pod)
		written.ResourceVersion = strconv.Itoa(version)
		return true, written, client.Tracker().Update(pods, written, p.Namespace)
	})
	stored := func() *v1.Pod {
		o, err := client.Tracker().Get(pods, p.Namespace, p.Name)
		if err != nil {
			t.Fatal(err)
		}
		return o.(*v1.Pod)
	}
	var watched *v1.Pod // the watch's copy; nil: up to date with the apiserver
	m, err := NewManager(Config{Client: kubetest.Wrap(client), Clock: clocktesting.NewFakeClock(t0),
		Cached: func(ns, name string) (*v1.Pod, bool) {
			if watched != nil {
				return watched, true
			}
			return stored(), true
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	gets := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "get" && a.GetResource().Resource == "pods" {
				n++
			}
		}
		return n
	}
	write := func(st v1.ContainerState) {
		t.Helper()
		m.Set(p, v1.PodStatus{Phase: v1.PodPending, ContainerStatuses: []v1.ContainerStatus{{Name: "c", Image: "busybox", State: st}}})
		m.writeDue(ctx)
	}

	write(v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}})
	written := stored()
	write(v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ErrImagePull"}})
	if n := gets(); n != 0 {
		t.Fatalf("%d GETs with the watch up to date, want 0", n)
	}

	// The watch still holds the first write when the third comes: the
	// third merges with what the second returned.
	watched = written
	write(v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(t0)}})
	if n := gets(); n != 0 {
		t.Fatalf("%d GETs with the watch behind the agent's last write, want 0", n)
	}
	st := stored().Status.ContainerStatuses[0].State
	if st.Running == nil || st.Waiting != nil {
		t.Errorf("container state in the apiserver %+v, want running alone", st)
	}

	// A failed write drops what the last one returned: the next reads the pod.
	failing := true
	client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if failing {
			failing = false
			return true, nil, errors.New("apiserver away")
		}
		return false, nil, nil
	})
	m.Set(p, v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{{Name: "c", Image: "busybox", Ready: true,
		State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(t0)}}}}})
	if err := m.write(ctx, m.pods[p.UID], m.pods[p.UID].status, false); err == nil {
		t.Fatal("write with the apiserver away succeeded")
	}
	if err := m.write(ctx, m.pods[p.UID], m.pods[p.UID].status, false); err != nil {
		t.Fatal(err)
	}
	if n := gets(); n != 1 {
		t.Fatalf("%d GETs after a failed write with the watch behind, want 1", n)
	}

	// A copy that is not of this pod (deleted and created again) is not
	// merged with, nor is what the last write returned.
	watched = stored().DeepCopy()
	watched.UID = "another"
	write(v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1}})
	if n := gets(); n != 2 {
		t.Fatalf("%d GETs with the watch holding another pod of the name, want 2", n)
	}
}

func TestNotOlder(t *testing.T) {
	tests := []struct {
		rv, written string
		want        bool
	}{
		{"5", "", true},
		{"", "", true},
		{"10", "9", true},
		{"9", "9", true},
		{"9", "10", false},
		{"", "9", false},
		{"x", "9", false},
	}
	for _, tt := range tests {
		if got := notOlder(tt.rv, tt.written); got != tt.want {
			t.Errorf("notOlder(%q, %q) = %v, want %v", tt.rv, tt.written, got, tt.want)
		}
	}
}
