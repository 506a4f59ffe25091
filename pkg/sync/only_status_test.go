package sync

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestOnlyStatusChanged(t *testing.T) {
	fromAPI := func(rv string, gen int64, mut ...func(*v1.Pod)) *v1.Pod {
		return basePod(append([]func(*v1.Pod){func(p *v1.Pod) { p.ResourceVersion, p.Generation = rv, gen }}, mut...)...)
	}
	image := func(p *v1.Pod) { p.Spec.Containers[0].Image = "busybox:2" }
	status := func(p *v1.Pod) { p.Status.Phase = v1.PodRunning }
	now := metav1.Now()
	tests := []struct {
		name string
		a, b *v1.Pod
		want bool
	}{
		{"status written back, one generation", fromAPI("1", 1), fromAPI("2", 1, status), true},
		{"spec changed, generation counted", fromAPI("1", 1), fromAPI("2", 2, image), false},
		{"generation counted, spec the same (a resize taken back)", fromAPI("1", 1), fromAPI("2", 2), false},
		{"deleted", fromAPI("1", 1), fromAPI("2", 1, func(p *v1.Pod) { p.DeletionTimestamp = &now }), false},
		{"grace period shortened", fromAPI("1", 1, func(p *v1.Pod) { p.DeletionTimestamp = &now; p.DeletionGracePeriodSeconds = ptr.To[int64](30) }),
			fromAPI("2", 1, func(p *v1.Pod) { p.DeletionTimestamp = &now; p.DeletionGracePeriodSeconds = ptr.To[int64](0) }), false},
		{"another pod", fromAPI("1", 1), fromAPI("2", 1, func(p *v1.Pod) { p.UID = "uid-2" }), false},
		// Without a generation (an older apiserver, a pod from a file) the specs are compared.
		{"no generation, status only", fromAPI("1", 0), fromAPI("2", 0, status), true},
		{"no generation, spec changed", fromAPI("1", 0), fromAPI("2", 0, image), false},
		{"from a file, spec changed", basePod(), basePod(image), false},
		{"from a file, the same", basePod(), basePod(), true},
		{"none before", nil, fromAPI("1", 1), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := onlyStatusChanged(tt.a, tt.b); got != tt.want {
				t.Errorf("onlyStatusChanged = %v, want %v", got, tt.want)
			}
		})
	}
}
