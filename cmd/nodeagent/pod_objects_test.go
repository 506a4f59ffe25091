package main

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
	"github.com/nodeagent/nodeagent/pkg/objcache"
	"github.com/nodeagent/nodeagent/pkg/volume"
)

// A pod's volumes being set up registers its references: the refresh
// reads from the watch. Their tear-down releases them.
func TestRegisteringVolumes(t *testing.T) {
	client := fake.NewClientset(&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app"}, Data: map[string]string{"k": "v"}})
	objects, err := objcache.New(objcache.Config{Client: kubetest.Wrap(client), SyncWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- objects.Run(ctx) }()
	defer func() { cancel(); <-done }()
	mgr, err := volume.NewManager(volume.Config{RootDir: t.TempDir(), Client: kubetest.Wrap(client), Objects: objects})
	if err != nil {
		t.Fatal(err)
	}
	vols := registeringVolumes{Manager: mgr, objects: objects}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-1"},
		Spec: v1.PodSpec{
			Containers: []v1.Container{{Name: "c"}},
			Volumes: []v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{
				ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "app"}}}}},
		},
	}
	for range 3 { // set up, then two refreshes
		if _, err := vols.MountPod(t.Context(), pod); err != nil {
			t.Fatalf("MountPod: %v", err)
		}
	}
	count := func(verb string) int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == verb && a.GetResource().Resource == "configmaps" {
				n++
			}
		}
		return n
	}
	if g, w := count("get"), count("watch"); g != 0 || w != 1 {
		t.Errorf("after three mounts: %d GETs and %d watches of configmaps, want 0 and 1", g, w)
	}
	if err := vols.UnmountPod(t.Context(), pod.UID); err != nil {
		t.Fatalf("UnmountPod: %v", err)
	}
	// Released: a read now goes to the apiserver.
	if _, err := objects.GetConfigMap(t.Context(), "ns", "app"); err != nil {
		t.Fatal(err)
	}
	if g := count("get"); g != 1 {
		t.Errorf("%d GETs after the pod's volumes went, want 1", g)
	}
}
