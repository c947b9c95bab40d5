// Package job owns the Job loop: run a Job's pods until enough of them
// succeed, or give up, as Kubernetes' Job controller does — a nightly
// export on every shop's device, a one-off migration, a cleanup.
//
// NonIndexed Jobs: up to parallelism pods at once, until completions pods
// have succeeded (without completions: until one has, and none is left
// running). A failed pod counts against backoffLimit (unless the pod
// failure policy ignores it, or fails the Job at once) and the next pod is
// created after an exponential delay (10 s, doubling, at most 6 min); past
// the limit, or past activeDeadlineSeconds, the Job fails and its running
// pods are stopped. suspend stops the running pods and resets startTime;
// resuming starts afresh. ttlSecondsAfterFinished deletes a finished Job
// (its pods with it, through the garbage collector).
//
// The counts come from the pods themselves, never going down: the Job
// keeps its finished pods (for their logs) until it is deleted.
//
// Indexed Jobs (indexed.go) run one successful pod per index, each pod
// told its index by annotation, label, JOB_COMPLETION_INDEX and hostname;
// the done and failed indexes are kept in the status as compressed
// ranges, so they outlive their pods. backoffLimitPerIndex gives each
// index its own failure budget and backoff.
package job
