package probe

import (
	"context"
	"math/rand/v2"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// Defaults the apiserver fills in; applied again here for pods that come
// from elsewhere (static pods, tests).
const (
	defaultPeriod           = 10 * time.Second
	defaultFailureThreshold = 3
	defaultSuccessThreshold = 1
)

// counter counts a probe's consecutive identical results and says when
// they reach the probe's threshold.
type counter struct {
	last Result
	run  int
}

// observe takes one run's result and returns the verdict it amounts to:
// the result once successThreshold successes or failureThreshold failures
// in a row are reached, else Unknown (the last verdict stands).
func (c *counter) observe(r Result, p *v1.Probe) Result {
	if r == c.last {
		c.run++
	} else {
		c.last, c.run = r, 1
	}
	need := int(p.SuccessThreshold)
	if need <= 0 {
		need = defaultSuccessThreshold
	}
	if r == Failure {
		need = int(p.FailureThreshold)
		if need <= 0 {
			need = defaultFailureThreshold
		}
	}
	if c.run < need {
		return Unknown
	}
	return r
}

// workerKey names one probe of one container instance: a restarted
// container gets new workers, with fresh counts and initial results.
type workerKey struct {
	containerID string
	kind        Kind
}

// worker is the goroutine of one probe of one container.
type worker struct {
	m         *Manager
	key       workerKey
	spec      *v1.Probe
	target    Target
	startedAt time.Time
	// jitter delays the first run of probes of containers that were
	// already running when the agent started, so that they do not all
	// run at once.
	jitter bool

	trigger chan struct{} // capacity 1: run now
	stop    chan struct{} // closed when the probe is no longer wanted
	count   counter
}

func period(p *v1.Probe) time.Duration {
	if p.PeriodSeconds <= 0 {
		return defaultPeriod
	}
	return time.Duration(p.PeriodSeconds) * time.Second
}

// firstDelay is how long until the probe first runs: its initial delay,
// counted from the container's start, plus a jitter when asked.
func (w *worker) firstDelay(now time.Time) time.Duration {
	d := max(w.startedAt.Add(time.Duration(w.spec.InitialDelaySeconds)*time.Second).Sub(now), 0)
	if w.jitter {
		d += rand.N(period(w.spec))
	}
	return d
}

func (w *worker) run(ctx context.Context) {
	clk := w.m.cfg.Clock
	timer := clk.NewTimer(w.firstDelay(clk.Now()))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.stop:
			return
		case <-timer.C():
		case <-w.trigger:
		}
		next, keep := w.step(ctx)
		if !keep {
			return
		}
		if !timer.Stop() {
			select {
			case <-timer.C():
			default:
			}
		}
		timer.Reset(next)
	}
}

// step runs the probe once if it is due and says when to run it next, or
// that this worker is finished: a liveness or startup probe that failed
// (the container is to be restarted, and a new one gets new workers) and
// a startup probe that succeeded.
func (w *worker) step(ctx context.Context) (time.Duration, bool) {
	now := w.m.cfg.Clock.Now()
	if wait := w.startedAt.Add(time.Duration(w.spec.InitialDelaySeconds) * time.Second).Sub(now); wait > 0 {
		return wait, true
	}
	if w.key.kind == Startup && w.m.started(w.key.containerID) {
		// Started before the agent did: nothing left to find out.
		return 0, false
	}
	if w.key.kind != Startup && !w.m.started(w.key.containerID) {
		// Liveness and readiness wait for the startup probe; its
		// success triggers them.
		return period(w.spec), true
	}
	r, ok := w.m.runProbe(ctx, w)
	if !ok {
		return period(w.spec), true
	}
	verdict := w.count.observe(r, w.spec)
	if verdict == Unknown {
		return period(w.spec), true
	}
	w.m.setResult(w.target.Pod.UID, w.key, verdict)
	switch {
	case verdict == Failure && (w.key.kind == Liveness || w.key.kind == Startup):
		klog.FromContext(ctx).V(2).Info("Container failed its probe, to be restarted", "probe", w.key.kind,
			"pod", klog.KObj(w.target.Pod), "container", w.target.Container.Name)
		return 0, false
	case verdict == Success && w.key.kind == Startup:
		w.m.triggerContainer(w.key.containerID)
		return 0, false
	}
	return period(w.spec), true
}

func (w *worker) poke() {
	select {
	case w.trigger <- struct{}{}:
	default:
	}
}
