package kube

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
)

// EventSink writes a recorder's core/v1 events, each in its own
// namespace, as client-go's sink for the clientset does.
type EventSink struct{ Client Interface }

var _ record.EventSink = EventSink{}

func (s EventSink) Create(event *corev1.Event) (*corev1.Event, error) {
	return s.Client.CoreV1().Events(event.Namespace).Create(context.TODO(), event, metav1.CreateOptions{})
}

func (s EventSink) Update(event *corev1.Event) (*corev1.Event, error) {
	return s.Client.CoreV1().Events(event.Namespace).Update(context.TODO(), event, metav1.UpdateOptions{})
}

// Patch applies the recorder's strategic merge patch (a repeated event's
// count and last timestamp).
func (s EventSink) Patch(event *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.Client.CoreV1().Events(event.Namespace).Patch(context.TODO(), event.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}
