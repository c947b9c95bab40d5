package controlloop

import (
	"context"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"flotilla.dev/flotilla/api"
)

// NewRecorder returns an EventRecorder that writes Events through client
// as component (the Event's source.component, e.g. "default-scheduler"),
// and a stop function that flushes nothing further and releases the
// broadcaster's goroutines. Events for the same object, reason and message
// are aggregated into one Event with a count, as in Kubernetes.
func NewRecorder(ctx context.Context, client kubernetes.Interface, component string) (record.EventRecorder, func()) {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	log := slog.Default().With("component", component)
	b.StartEventWatcher(func(e *corev1.Event) {
		log.Debug("event", "type", e.Type, "reason", e.Reason,
			"object", e.InvolvedObject.Kind+"/"+e.InvolvedObject.Namespace+"/"+e.InvolvedObject.Name,
			"message", e.Message)
	})
	return b.NewRecorder(api.Scheme, corev1.EventSource{Component: component}), b.Shutdown
}
