package metrics

import "testing"

func TestImageGarbageCollectedByReason(t *testing.T) {
	m := New()
	m.ObserveImageGarbageCollected(ImageGCReasonAge)
	m.ObserveImageGarbageCollected(ImageGCReasonSpace)
	m.ObserveImageGarbageCollected(ImageGCReasonSpace)
	fams, _ := scrape(t, m.Handler())
	for reason, want := range map[string]float64{ImageGCReasonAge: 1, ImageGCReasonSpace: 2} {
		if got := sample(t, fams, "kubelet_image_garbage_collected_total", "reason", reason).GetCounter().GetValue(); got != want {
			t.Errorf("kubelet_image_garbage_collected_total{reason=%q} = %v, want %v", reason, got, want)
		}
	}
}
