package mountpod

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestNames(t *testing.T) {
	handles := []string{"vol-1", "a/b c:d", strings.Repeat("x", 300), ""}
	seen := map[string]string{}
	for _, h := range handles {
		name := mountPodName("node-a", h)
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 || len(name) > 63 {
			t.Errorf("mountPodName(%q) = %q: not a valid pod name: %v", h, name, errs)
		}
		if errs := validation.IsValidLabelValue(volumeKey("node-a", h)); len(errs) > 0 {
			t.Errorf("volumeKey(%q) is not a label value: %v", h, errs)
		}
		if strings.Contains(volumeKey("node-a", h), "/") {
			t.Errorf("volumeKey(%q) has a slash", h)
		}
		if other, ok := seen[name]; ok {
			t.Errorf("handles %q and %q share the mount pod %s", h, other, name)
		}
		seen[name] = h
		if mountPodName("node-a", h) != name {
			t.Errorf("mountPodName(%q) is not stable", h)
		}
		if mountPodName("node-b", h) == name {
			t.Errorf("mountPodName(%q) is the same on two nodes", h)
		}
	}
	if got, want := volumeDir("/state", "n", "v"), "/state/"+volumeKey("n", "v"); got != want {
		t.Errorf("volumeDir = %q, want %q", got, want)
	}
	if errs := validation.IsQualifiedName(refKey("/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pv/mount")); len(errs) > 0 {
		t.Errorf("refKey is not an annotation key: %v", errs)
	}
}

func TestRefs(t *testing.T) {
	const a, b = "/pods/a/mount", "/pods/b/mount"
	base := func() *corev1.Pod {
		p := &corev1.Pod{}
		p.Annotations = map[string]string{AnnotationHandle: "vol"}
		return p
	}
	tests := []struct {
		name        string
		pod         func() *corev1.Pod
		change      func(*corev1.Pod) bool
		wantChanged bool
		want        []string
	}{
		{name: "first user", pod: base, change: func(p *corev1.Pod) bool { return addRef(p, a) }, wantChanged: true, want: []string{a}},
		{name: "no annotations yet", pod: func() *corev1.Pod { return &corev1.Pod{} },
			change: func(p *corev1.Pod) bool { return addRef(p, a) }, wantChanged: true, want: []string{a}},
		{name: "second user", pod: func() *corev1.Pod { p := base(); addRef(p, a); return p },
			change: func(p *corev1.Pod) bool { return addRef(p, b) }, wantChanged: true, want: []string{a, b}},
		{name: "same user again", pod: func() *corev1.Pod { p := base(); addRef(p, a); return p },
			change: func(p *corev1.Pod) bool { return addRef(p, a) }, want: []string{a}},
		{name: "one of two leaves", pod: func() *corev1.Pod { p := base(); addRef(p, a); addRef(p, b); return p },
			change: func(p *corev1.Pod) bool { return dropRef(p, b) }, wantChanged: true, want: []string{a}},
		{name: "last leaves", pod: func() *corev1.Pod { p := base(); addRef(p, a); return p },
			change: func(p *corev1.Pod) bool { return dropRef(p, a) }, wantChanged: true},
		{name: "unknown user leaves", pod: func() *corev1.Pod { p := base(); addRef(p, a); return p },
			change: func(p *corev1.Pod) bool { return dropRef(p, b) }, want: []string{a}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.pod()
			if got := tt.change(p); got != tt.wantChanged {
				t.Errorf("changed = %v, want %v", got, tt.wantChanged)
			}
			if got := Users(p); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("refs = %q, want %q", got, tt.want)
			}
			if p.Annotations[AnnotationHandle] != "" && p.Annotations[AnnotationHandle] != "vol" {
				t.Errorf("other annotations touched: %v", p.Annotations)
			}
		})
	}
}
