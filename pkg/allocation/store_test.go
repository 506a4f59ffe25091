package allocation

import (
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
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
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, Dir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, Dir, "u9.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(root)
	if err == nil {
		t.Error("a bad checkpoint was not reported")
	}
	if s == nil {
		t.Fatal("no usable store after a bad checkpoint")
	}
	if _, ok := s.Allocated("u9"); ok {
		t.Error("a bad checkpoint gave an allocation")
	}
	if err := s.SetAllocated(podWith("u1", "1")); err != nil {
		t.Errorf("the store does not work after a bad checkpoint: %v", err)
	}
}

// A change writes the one pod's file; the other pods' files are left as they are.
func TestStoreWritesOnePodsFile(t *testing.T) {
	root := t.TempDir()
	s, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"u1", "u2", "u3"} {
		if err := s.SetAllocated(podWith(uid, "1")); err != nil {
			t.Fatal(err)
		}
	}
	before, err := os.Stat(filepath.Join(root, Dir, "u2.json"))
	if err != nil {
		t.Fatal(err)
	}
	p := podWith("u1", "2")
	if err := s.SetActuated(p.UID, "a", p.Spec.Containers[0].Resources); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(filepath.Join(root, Dir, "u2.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Error("a change of u1 rewrote u2's checkpoint")
	}
	if err := s.Remove("u3"); err != nil {
		t.Fatal(err)
	}
	names := dirNames(t, filepath.Join(root, Dir))
	if len(names) != 2 || names[0] != "u1.json" || names[1] != "u2.json" {
		t.Errorf("checkpoint files = %v, want u1.json and u2.json", names)
	}
	if err := s.SetAllocated(podWith("../escape", "1")); err == nil {
		t.Error("a UID that is not a file name was saved")
	}
	if _, err := os.Stat(filepath.Join(root, "escape.json")); err == nil {
		t.Error("a hostile UID wrote outside the checkpoint dir")
	}
}

// The whole-node files of earlier versions are read once, written as one file a pod and
// removed; a write cut short (a temporary file) is cleaned up.
func TestStoreConvertsTheWholeNodeFiles(t *testing.T) {
	root := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(root, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(legacyAllocatedFile, `{"u1":{"a":{"requests":{"cpu":"1"}}},"u2":{"a":{"requests":{"cpu":"2"}}}}`)
	write(legacyActuatedFile, `{"u1":{"a":{"requests":{"cpu":"500m"}}}}`)
	if err := os.MkdirAll(filepath.Join(root, Dir), 0o700); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(Dir, ".u7.1234"), "partial")
	s, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	a, ok := s.Allocated("u2")
	if q := a["a"].Requests[v1.ResourceCPU]; !ok || q.Cmp(resource.MustParse("2")) != 0 {
		t.Errorf("u2's allocation = %v %v, want cpu 2", a, ok)
	}
	if r, ok := s.Actuated("u1", "a"); !ok || r.Requests.Cpu().String() != "500m" {
		t.Errorf("u1's applied resources = %v %v, want cpu 500m", r, ok)
	}
	for _, name := range []string{legacyAllocatedFile, legacyActuatedFile} {
		if _, err := os.Stat(filepath.Join(root, name)); err == nil {
			t.Errorf("%s was kept", name)
		}
	}
	if names := dirNames(t, filepath.Join(root, Dir)); len(names) != 2 || names[0] != "u1.json" || names[1] != "u2.json" {
		t.Errorf("checkpoint files = %v, want u1.json and u2.json", names)
	}
	s2, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := s2.Actuated("u1", "a"); !ok || r.Requests.Cpu().String() != "500m" {
		t.Errorf("reopened: u1's applied resources = %v %v", r, ok)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestSameResourcesAgreesWithSemanticEquality(t *testing.T) {
	q := resource.MustParse
	cases := []v1.ResourceRequirements{
		{},
		{Limits: v1.ResourceList{}},
		{Requests: v1.ResourceList{v1.ResourceCPU: q("100m")}},
		{Requests: v1.ResourceList{v1.ResourceCPU: q("0.1")}},
		{Requests: v1.ResourceList{v1.ResourceCPU: q("200m")}},
		{Requests: v1.ResourceList{v1.ResourceMemory: q("100m")}},
		{Requests: v1.ResourceList{v1.ResourceCPU: q("100m"), v1.ResourceMemory: q("64Mi")}},
		{Limits: v1.ResourceList{v1.ResourceMemory: q("64Mi")}, Requests: v1.ResourceList{v1.ResourceMemory: q("67108864")}},
		{Limits: v1.ResourceList{v1.ResourceMemory: q("64Mi")}},
		{Claims: []v1.ResourceClaim{{Name: "gpu"}}},
		{Claims: []v1.ResourceClaim{{Name: "gpu", Request: "one"}}},
		{Claims: []v1.ResourceClaim{}},
	}
	for i, a := range cases {
		for j, b := range cases {
			if got, want := SameResources(a, b), equality.Semantic.DeepEqual(a, b); got != want {
				t.Errorf("cases %d and %d: SameResources %v, equality.Semantic %v", i, j, got, want)
			}
		}
	}
}
