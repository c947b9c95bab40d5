package job

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// Pod metadata of Indexed Jobs, as Kubernetes'.
const (
	// AnnotationIndexFailureCount is how many pods of an index failed
	// before this one (backoffLimitPerIndex).
	AnnotationIndexFailureCount = "batch.kubernetes.io/job-index-failure-count"
	// EnvCompletionIndex is the index in every container's environment.
	EnvCompletionIndex = "JOB_COMPLETION_INDEX"
)

// indexSet is a set of completion indexes below a Job's completions.
type indexSet map[int]struct{}

// parseIndexes reads status.completedIndexes or status.failedIndexes
// ("1,3-5,7"), keeping the indexes below completions: a lowered
// completions (Kubernetes allows it with parallelism) drops the rest.
func parseIndexes(s string, completions int32) (indexSet, error) {
	set := indexSet{}
	if s == "" {
		return set, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil {
			return set, fmt.Errorf("index %q of %q: %w", part, s, err)
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil {
				return set, fmt.Errorf("index range %q of %q: %w", part, s, err)
			}
		}
		for i := first; i <= last && i < int(completions); i++ {
			set[i] = struct{}{}
		}
	}
	return set, nil
}

func (s indexSet) has(i int) bool { _, ok := s[i]; return ok }

// String writes the set as Kubernetes does: increasing, three or more
// consecutive indexes as first-last.
func (s indexSet) String() string {
	idx := make([]int, 0, len(s))
	for i := range s {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var b strings.Builder
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		switch {
		case j-i >= 2:
			fmt.Fprintf(&b, "%d-%d", idx[i], idx[j])
		case j-i == 1:
			fmt.Fprintf(&b, "%d,%d", idx[i], idx[j])
		default:
			b.WriteString(strconv.Itoa(idx[i]))
		}
		i = j + 1
	}
	return b.String()
}

// podIndex is a pod's completion index, from its annotation (the label
// is a copy for selectors); false when missing or out of range.
func podIndex(p *corev1.Pod, completions int32) (int, bool) {
	v, ok := p.Annotations[batchv1.JobCompletionIndexAnnotation]
	if !ok {
		v, ok = p.Labels[batchv1.JobCompletionIndexAnnotation]
	}
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(v)
	if err != nil || i < 0 || i >= int(completions) {
		return 0, false
	}
	return i, true
}

// indexPod gives a new pod its index: the annotation and label, the
// hostname <job>-<index> (a template's own hostname stays; its subdomain
// always does, so the index names resolve under a headless Service), the
// JOB_COMPLETION_INDEX variable from the annotation, and the count of the
// index's failures so far.
func indexPod(p *corev1.Pod, job *batchv1.Job, index int, failures int32) {
	v := strconv.Itoa(index)
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Annotations[batchv1.JobCompletionIndexAnnotation] = v
	p.Labels[batchv1.JobCompletionIndexAnnotation] = v
	if job.Spec.BackoffLimitPerIndex != nil {
		p.Annotations[AnnotationIndexFailureCount] = strconv.Itoa(int(failures))
	}
	p.GenerateName = fmt.Sprintf("%s-%d-", job.Name, index)
	if p.Spec.Hostname == "" {
		p.Spec.Hostname = fmt.Sprintf("%s-%d", job.Name, index)
	}
	env := corev1.EnvVar{Name: EnvCompletionIndex, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
		APIVersion: "v1", FieldPath: fmt.Sprintf("metadata.annotations['%s']", batchv1.JobCompletionIndexAnnotation)}}}
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			if !hasEnv(cs[i].Env, EnvCompletionIndex) {
				cs[i].Env = append(cs[i].Env, env)
			}
		}
	}
}

func hasEnv(env []corev1.EnvVar, name string) bool {
	for _, e := range env {
		if e.Name == name {
			return true
		}
	}
	return false
}
