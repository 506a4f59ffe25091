package allocation

import (
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func podWith(uid, cpu string) *v1.Pod {
	r := v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}}
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}, Spec: v1.PodSpec{
		InitContainers: []v1.Container{{Name: "init"}},
		Containers:     []v1.Container{{Name: "a", Resources: r}, {Name: "b"}},
	}}
}

func TestStoreApplyRetainAndReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, pending := s.Apply(podWith("u1", "1")); pending || got.Spec.Containers[0].Resources.Requests.Cpu().String() != "1" {
		t.Fatalf("a pod without allocation is taken as it is: %v %v", got, pending)
	}
	for _, p := range []*v1.Pod{podWith("u1", "1"), podWith("u2", "2")} {
		if err := s.SetAllocated(p); err != nil {
			t.Fatal(err)
		}
		if err := s.SetActuated(p.UID, "a", p.Spec.Containers[0].Resources); err != nil {
			t.Fatal(err)
		}
	}
	want := podWith("u1", "3")
	got, pending := s.Apply(want)
	if !pending || got == want || got.Spec.Containers[0].Resources.Requests.Cpu().String() != "1" ||
		want.Spec.Containers[0].Resources.Requests.Cpu().String() != "3" {
		t.Errorf("Apply of a resized spec = %v (pending %v); it must copy, not modify", got.Spec.Containers[0].Resources, pending)
	}
	if err := s.Retain(func(uid types.UID) bool { return uid == "u1" }); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s2.Allocated("u2"); ok {
		t.Error("a pod Retain dropped came back after reopening")
	}
	if r, ok := s2.Actuated("u1", "a"); !ok || r.Requests.Cpu().String() != "1" {
		t.Errorf("reopened applied record = %v %v", r, ok)
	}
	if err := s2.Remove("u1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := s2.Allocated("u1"); ok {
		t.Error("Remove kept the allocation")
	}
}

func TestStoreStartsAfreshOnABadCheckpoint(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, AllocatedFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir)
	if err == nil {
		t.Error("a bad checkpoint was not reported")
	}
	if s == nil {
		t.Fatal("no usable store after a bad checkpoint")
	}
	if err := s.SetAllocated(podWith("u1", "1")); err != nil {
		t.Errorf("the store does not work after a bad checkpoint: %v", err)
	}
}
