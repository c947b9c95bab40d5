package defaults

import (
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Defaults of the apps kinds.
const (
	DefaultReplicas                = int32(1)
	DefaultRevisionHistoryLimit    = int32(10)
	DefaultProgressDeadlineSeconds = int32(600)
)

func deployment(d *appsv1.Deployment) {
	s := &d.Spec
	if s.Replicas == nil {
		s.Replicas = ptr(DefaultReplicas)
	}
	if s.Strategy.Type == "" {
		s.Strategy.Type = appsv1.RollingUpdateDeploymentStrategyType
	}
	if s.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType {
		if s.Strategy.RollingUpdate == nil {
			s.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{}
		}
		ru := s.Strategy.RollingUpdate
		if ru.MaxUnavailable == nil {
			ru.MaxUnavailable = ptr(intstr.FromString("25%"))
		}
		if ru.MaxSurge == nil {
			ru.MaxSurge = ptr(intstr.FromString("25%"))
		}
	}
	if s.RevisionHistoryLimit == nil {
		s.RevisionHistoryLimit = ptr(DefaultRevisionHistoryLimit)
	}
	if s.ProgressDeadlineSeconds == nil {
		s.ProgressDeadlineSeconds = ptr(DefaultProgressDeadlineSeconds)
	}
	podTemplate(&s.Template)
}

func replicaSet(rs *appsv1.ReplicaSet) {
	if rs.Spec.Replicas == nil {
		rs.Spec.Replicas = ptr(DefaultReplicas)
	}
	podTemplate(&rs.Spec.Template)
}

func daemonSet(ds *appsv1.DaemonSet) {
	s := &ds.Spec
	if s.UpdateStrategy.Type == "" {
		s.UpdateStrategy.Type = appsv1.RollingUpdateDaemonSetStrategyType
	}
	if s.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType {
		if s.UpdateStrategy.RollingUpdate == nil {
			s.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{}
		}
		ru := s.UpdateStrategy.RollingUpdate
		if ru.MaxUnavailable == nil {
			ru.MaxUnavailable = ptr(intstr.FromInt32(1))
		}
		if ru.MaxSurge == nil {
			ru.MaxSurge = ptr(intstr.FromInt32(0))
		}
	}
	if s.RevisionHistoryLimit == nil {
		s.RevisionHistoryLimit = ptr(DefaultRevisionHistoryLimit)
	}
	podTemplate(&s.Template)
}
