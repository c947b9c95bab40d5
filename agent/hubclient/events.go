package hubclient

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// EventSink writes an event recorder's Events (record.EventSink) in the
// namespace each Event names, as client-go's EventSinkImpl does.
type EventSink struct {
	Client Interface
}

// The recorder's sink has no context: its writes, like client-go's, end
// on the client's timeout, and the broadcaster gives up on them after a
// few tries.

func (s *EventSink) Create(ev *corev1.Event) (*corev1.Event, error) {
	return s.Client.CoreV1().Events(ev.Namespace).Create(context.Background(), ev, metav1.CreateOptions{})
}

func (s *EventSink) Update(ev *corev1.Event) (*corev1.Event, error) {
	return s.Client.CoreV1().Events(ev.Namespace).Update(context.Background(), ev, metav1.UpdateOptions{})
}

func (s *EventSink) Patch(ev *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.Client.CoreV1().Events(ev.Namespace).Patch(context.Background(), ev.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}
