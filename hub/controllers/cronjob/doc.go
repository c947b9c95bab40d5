// Package cronjob owns the CronJob loop: create a CronJob's Jobs on its
// schedule, as Kubernetes' CronJob controller does — the nightly export
// from every shop, the hourly cleanup.
//
// The schedule is read by robfig/cron's standard parser (five fields or
// @hourly, @daily...), as kube-controller-manager's, in spec.timeZone or
// else the hub's local zone. The loop is level-triggered: each pass reads
// the CronJob and its Jobs, takes the one step due (record finished Jobs,
// trim the history, start the most recent missed run), and asks to look
// again at the next schedule time; Job changes wake it too. There is no
// polling.
//
// A run is one Job named <cronjob>-<scheduled minutes since the epoch>
// with the batch.kubernetes.io/cronjob-scheduled-timestamp annotation, so
// a pass repeated after a crash finds the Job it created instead of a
// second one. Runs missed for longer than startingDeadlineSeconds are
// skipped (MissSchedule); only the most recent missed run is started,
// and more than 100 missed runs are reported (TooManyMissedTimes).
// concurrencyPolicy Forbid skips a run while one is active, Replace
// deletes the active ones first.
//
// The schedule is the hub's: a device that is offline at the scheduled
// time gets the Job's pods when it is back (see docs/autonomy.md).
package cronjob
