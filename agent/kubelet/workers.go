package kubelet

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// waiting is why a container is not running, for its status.
type waiting struct {
	Reason, Message string
}

// podWorker is one pod's goroutine. Pokes are deduplicated by a
// one-slot channel: any number of events while a sync runs cause exactly
// one more sync. The fields below are owned by the worker's goroutine.
type podWorker struct {
	uid  types.UID
	poke chan struct{}

	// lastPod is the last desired object seen, kept to stop the pod
	// properly after it disappears from every source.
	lastPod *corev1.Pod
	// origin is the source that last had the pod ("" for a pod found
	// only in the runtime).
	origin string
	// waiting holds each container's current waiting reason.
	waiting map[string]waiting
	// startErrors keeps why a container attempt failed to start, by
	// container ID, for its StartError state.
	startErrors map[string]string
	errDelay    time.Duration

	mu    sync.Mutex // guards state and lastErr, read by PodCounts and LocalPods
	state podState
	// lastErr is why the last sync failed ("" after a good one).
	lastErr string
}

type podState int

const (
	podPending podState = iota
	podRunning
	podTerminating
	podFinished
)

func (w *podWorker) setState(s podState) {
	w.mu.Lock()
	w.state = s
	w.mu.Unlock()
}

func (w *podWorker) getState() podState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state
}

// syncResult is what one sync asks for next.
type syncResult struct {
	// requeue is when to look again at the latest (0: the resync interval).
	requeue time.Duration
	// done: the pod is gone everywhere and its worker can end.
	done bool
}

type syncFunc func(ctx context.Context, w *podWorker) (syncResult, error)

// podWorkers runs one worker per pod UID.
type podWorkers struct {
	sync   syncFunc
	resync time.Duration
	errMin time.Duration
	errMax time.Duration
	onErr  func(uid types.UID, err error)

	mu      sync.Mutex
	ctx     context.Context
	workers map[types.UID]*podWorker
	wg      sync.WaitGroup
}

func newPodWorkers(sync syncFunc, resync, errMin, errMax time.Duration, onErr func(types.UID, error)) *podWorkers {
	return &podWorkers{sync: sync, resync: resync, errMin: errMin, errMax: errMax, onErr: onErr, workers: map[types.UID]*podWorker{}}
}

// start sets the context workers run in; pokes before it are kept.
func (p *podWorkers) start(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ctx = ctx
	for _, w := range p.workers {
		p.launchLocked(w)
	}
}

// Poke asks the pod's worker to sync, creating it if needed.
func (p *podWorkers) Poke(uid types.UID) {
	if uid == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	w, ok := p.workers[uid]
	if !ok {
		w = &podWorker{uid: uid, poke: make(chan struct{}, 1), waiting: map[string]waiting{}, startErrors: map[string]string{}}
		p.workers[uid] = w
		if p.ctx != nil {
			p.launchLocked(w)
		}
	}
	select {
	case w.poke <- struct{}{}:
	default:
	}
}

func (p *podWorkers) launchLocked(w *podWorker) {
	if p.ctx.Err() != nil {
		return
	}
	p.wg.Add(1)
	go p.loop(p.ctx, w)
}

func (p *podWorkers) loop(ctx context.Context, w *podWorker) {
	defer p.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.poke:
		case <-timer.C:
		}
		res, err := p.sync(ctx, w)
		if ctx.Err() != nil {
			return
		}
		next := res.requeue
		if err != nil {
			if w.errDelay == 0 {
				w.errDelay = p.errMin
			} else if w.errDelay *= 2; w.errDelay > p.errMax {
				w.errDelay = p.errMax
			}
			next = w.errDelay
			w.mu.Lock()
			w.lastErr = err.Error()
			w.mu.Unlock()
			if p.onErr != nil {
				p.onErr(w.uid, err)
			}
		} else {
			w.errDelay = 0
			w.mu.Lock()
			w.lastErr = ""
			w.mu.Unlock()
			if res.done {
				p.mu.Lock()
				if len(w.poke) == 0 {
					delete(p.workers, w.uid)
					p.mu.Unlock()
					return
				}
				p.mu.Unlock()
				continue
			}
		}
		if next <= 0 || next > p.resync {
			next = p.resync
		}
		timer.Reset(next)
	}
}

// uids lists the pods that have a worker.
func (p *podWorkers) uids() []types.UID {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]types.UID, 0, len(p.workers))
	for u := range p.workers {
		out = append(out, u)
	}
	return out
}

func (p *podWorkers) has(uid types.UID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.workers[uid]
	return ok
}

// counts tallies the workers' states.
func (p *podWorkers) counts() (pending, running, terminating int) {
	p.mu.Lock()
	ws := make([]*podWorker, 0, len(p.workers))
	for _, w := range p.workers {
		ws = append(ws, w)
	}
	p.mu.Unlock()
	for _, w := range ws {
		switch w.getState() {
		case podPending:
			pending++
		case podRunning:
			running++
		case podTerminating:
			terminating++
		}
	}
	return
}

// lastErrors returns the pods whose last sync failed, and why.
func (p *podWorkers) lastErrors() map[types.UID]string {
	p.mu.Lock()
	ws := make([]*podWorker, 0, len(p.workers))
	for _, w := range p.workers {
		ws = append(ws, w)
	}
	p.mu.Unlock()
	out := map[types.UID]string{}
	for _, w := range ws {
		w.mu.Lock()
		if w.lastErr != "" {
			out[w.uid] = w.lastErr
		}
		w.mu.Unlock()
	}
	return out
}

// wait waits for every worker to return after ctx ended.
func (p *podWorkers) wait() { p.wg.Wait() }
