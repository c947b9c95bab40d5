package controllerutil

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"flotilla.dev/flotilla/api"
)

// ErrLeaderLost is returned by RunElected when the lease was lost while the
// loop ran (as opposed to ctx ending).
var ErrLeaderLost = errors.New("leader election lease lost")

// LeaderElection configures RunElected. The durations default to
// Kubernetes' component defaults (15 s lease, 10 s renew deadline, 2 s
// retry).
type LeaderElection struct {
	// Enabled turns election on; off, RunElected just runs the loop.
	Enabled bool
	// Namespace of the Lease; default flotilla-system.
	Namespace string
	// LeaseName names the Lease; one per loop (or one per hub process).
	// Required when Enabled.
	LeaseName string
	// Identity of this candidate; default "<hostname>_<random>".
	Identity      string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

func (le LeaderElection) withDefaults() (LeaderElection, error) {
	if le.LeaseName == "" {
		return le, errors.New("leader election: LeaseName is empty; set it to the loop's or the hub's lease name")
	}
	if le.Namespace == "" {
		le.Namespace = api.NamespaceSystem
	}
	if le.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return le, fmt.Errorf("leader election: identity from hostname: %w", err)
		}
		var b [6]byte
		if _, err := rand.Read(b[:]); err != nil {
			return le, fmt.Errorf("leader election: identity suffix: %w", err)
		}
		le.Identity = host + "_" + hex.EncodeToString(b[:])
	}
	if le.LeaseDuration == 0 {
		le.LeaseDuration = 15 * time.Second
	}
	if le.RenewDeadline == 0 {
		le.RenewDeadline = 10 * time.Second
	}
	if le.RetryPeriod == 0 {
		le.RetryPeriod = 2 * time.Second
	}
	return le, nil
}

// RunElected runs run(ctx) while this process holds the Lease described by
// le, or directly when le is not Enabled. It returns run's error, nil when
// ctx ended, or ErrLeaderLost when the lease was lost (run's context is
// cancelled and run is waited for first). The lease is released only after
// run has returned, so two holders never run the loop at once.
func RunElected(ctx context.Context, client kubernetes.Interface, le LeaderElection, run func(ctx context.Context) error) error {
	if !le.Enabled {
		return run(ctx)
	}
	le, err := le.withDefaults()
	if err != nil {
		return err
	}
	log := slog.Default().With("lease", le.Namespace+"/"+le.LeaseName, "identity", le.Identity)

	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	// The elector outlives ctx by the time run takes to stop, so the lease
	// is released only once nobody here acts on it any more.
	electCtx, cancelElect := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelElect()

	var (
		mu      sync.Mutex
		started bool
		stopped bool
		runDone = make(chan error, 1)
	)
	// stopRun cancels run and reports whether it had started (and so will
	// send on runDone).
	stopRun := func() bool {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		cancelRun()
		return started
	}

	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: le.LeaseName},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
		},
		LeaseDuration:   le.LeaseDuration,
		RenewDeadline:   le.RenewDeadline,
		RetryPeriod:     le.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            le.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				mu.Lock()
				if stopped {
					mu.Unlock()
					return
				}
				started = true
				mu.Unlock()
				log.Info("started leading")
				runDone <- run(runCtx)
			},
			OnStoppedLeading: func() {},
			OnNewLeader: func(id string) {
				log.Info("leader observed", "leader", id)
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election %s/%s: %w", le.Namespace, le.LeaseName, err)
	}
	electorDone := make(chan struct{})
	go func() {
		defer close(electorDone)
		elector.Run(electCtx)
	}()

	select {
	case <-ctx.Done():
		if stopRun() {
			err = <-runDone
		}
		cancelElect()
		<-electorDone
		return err
	case err = <-runDone:
		// run stopped on its own; give the lease up for another hub.
		stopRun()
		cancelElect()
		<-electorDone
		return err
	case <-electorDone:
		if stopRun() {
			<-runDone
		}
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("lease %s/%s held by %s: %w", le.Namespace, le.LeaseName, le.Identity, ErrLeaderLost)
	}
}

// RunCandidate is RunElected for as long as ctx lasts: a candidate that
// loses the lease (it could not renew it in time, or another candidate
// took it) becomes a candidate again once run has returned, instead of
// ending the process. In a hub that is what keeps its API serving its
// devices: only the loop stops, and when it leads again, run starts
// afresh, its caches listed anew. It returns run's own error, or nil
// when ctx ended.
func RunCandidate(ctx context.Context, client kubernetes.Interface, le LeaderElection, run func(ctx context.Context) error) error {
	for {
		err := RunElected(ctx, client, le, run)
		if !errors.Is(err, ErrLeaderLost) {
			return err
		}
		slog.Default().Warn("lost the lease; a candidate again", "lease", le.LeaseName, "err", err)
	}
}
