package volume

import (
	"context"
	"strconv"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// forbiddenRetries are the waits before asking again for what a pod just
// bound here may read (its first token, its claims and their volumes)
// when the apiserver refused it (Forbidden): the Node authorizer learns
// that a pod is bound here from its own watch, which may be a moment
// behind the agent's, and refuses until it has. While 100 pods start at
// once on two cores that moment is often a few hundred milliseconds:
// waits from 50 ms sent 1.2 to 1.5 token requests a pod (the apiserver's
// audit: "no relationship found between node and this object"), so the
// first wait is a quarter of a second.
var forbiddenRetries = []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second}

// lagHoldMax is the longest a pod's first read waits for another pod's:
// a pod refused for good holds no other pod back for longer.
var lagHoldMax = 2 * time.Second

// authorizerLag orders the first reads of pods just bound here so that
// the Node authorizer refuses as few as it may. Its graph takes in the
// same pod events as the agent's watch, in the same order (by
// resourceVersion), a moment later; once it let one pod's read through,
// it has taken in that pod's binding, and with it every pod bound before
// (the agent's copy of a pod is most often its binding's; where it is a
// later one, a read the graph still refuses is asked again). So a pod
// whose resourceVersion is at most that of a pod already let through
// (caught) reads at once; any other waits while one such read, the probe,
// is under way, and the probe is the read of the newest pod waiting,
// whose answer lets every older one through. When a hundred pods are
// bound at once that refuses one read a retry while the graph lags, where
// sending them all at once had them refused by the dozen.
type authorizerLag struct {
	mu sync.Mutex
	// caught is the highest resourceVersion of a pod a first read was
	// let through for.
	caught uint64
	// probing: a read of a pod newer than caught is under way.
	probing bool
	// waiting counts the reads held back, by their pod's resourceVersion.
	waiting map[uint64]int
	// changed, made by the first read to wait, is closed when the above
	// change in a way a waiting read must look at.
	changed chan struct{}
}

// turn returns once the first read of the pod at resourceVersion rv may
// be sent, or lagHoldMax has passed, or ctx is done; the read's caller
// then calls answered once with whether the authorizer let it through.
// A pod with no resourceVersion it can order reads at once.
func (l *authorizerLag) turn(ctx context.Context, rv uint64) (answered func(through bool)) {
	if rv == 0 {
		return func(bool) {}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var timeout *time.Timer
	defer func() {
		if timeout != nil {
			timeout.Stop()
		}
	}()
	queued, gaveUp := false, false
	for {
		probe := !l.probing && rv > l.caught && rv >= l.newestWaitingLocked()
		if rv <= l.caught || probe || gaveUp || ctx.Err() != nil {
			if queued {
				if l.waiting[rv]--; l.waiting[rv] == 0 {
					delete(l.waiting, rv)
				}
			}
			if probe {
				l.probing = true
			} else if queued && rv > l.caught {
				// Given up: the next newest may have to probe.
				l.changeLocked()
			}
			return l.answered(rv, probe)
		}
		if !queued {
			if l.waiting == nil {
				l.waiting = map[uint64]int{}
			}
			l.waiting[rv]++
			queued = true
			timeout = time.NewTimer(lagHoldMax)
		}
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		changed := l.changed
		l.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
		case <-timeout.C:
			gaveUp = true
		}
		l.mu.Lock()
	}
}

// answered returns the function a read calls with its answer: a read let
// through moves caught up to its pod; the probe's answer, either way,
// lets the next probe go.
func (l *authorizerLag) answered(rv uint64, probe bool) func(through bool) {
	var once sync.Once
	return func(through bool) {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			moved := through && rv > l.caught
			if moved {
				l.caught = rv
			}
			if probe {
				l.probing = false
			}
			if moved || probe {
				l.changeLocked()
			}
		})
	}
}

// newestWaitingLocked is the highest resourceVersion of the reads held
// back, zero when none is.
func (l *authorizerLag) newestWaitingLocked() uint64 {
	var newest uint64
	for rv := range l.waiting {
		newest = max(newest, rv)
	}
	return newest
}

// changeLocked wakes the reads held back to look again.
func (l *authorizerLag) changeLocked() {
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// podVersion is the pod's resourceVersion as a number, zero when it is
// not one (as from an apiserver whose storage is not etcd, or a test).
func podVersion(pod *v1.Pod) uint64 {
	rv, err := strconv.ParseUint(pod.ResourceVersion, 10, 64)
	if err != nil {
		return 0
	}
	return rv
}

// whileForbidden reads what the pod just bound here may read, in its turn
// (lag), and again after each of forbiddenRetries while the apiserver
// refuses it (Forbidden); it returns the last answer.
func whileForbidden[T any](ctx context.Context, lag *authorizerLag, pod *v1.Pod, read func() (T, error)) (T, error) {
	answered := lag.turn(ctx, podVersion(pod))
	for i := 0; ; i++ {
		v, err := read()
		if err == nil || !apierrors.IsForbidden(err) || i == len(forbiddenRetries) {
			// NotFound came from past the authorizer too.
			answered(err == nil || apierrors.IsNotFound(err))
			return v, err
		}
		t := time.NewTimer(forbiddenRetries[i])
		select {
		case <-ctx.Done():
			t.Stop()
			answered(false)
			return v, err
		case <-t.C:
		}
	}
}
