package pleg

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// The runtime's container events (CRI GetContainerEvents, which containerd 2 serves) are
// the primary signal, as in the kubelet's evented PLEG: an event makes a relist of its pod
// follow within EventRelistDelay (podrelist.go), and while the stream is open the
// periodic relist of the whole runtime, the fallback and the health check, runs every
// EventedRelistPeriod instead of every second. At 250 pods the relist every second was the
// largest single cost of a node at rest (a sixth of its CPU). The cache stays what a
// relist finds: an event only says which pod to look at, and when.
const (
	// EventedRelistPeriod is the relist period while the event stream is open: well
	// within the 3-minute health threshold.
	EventedRelistPeriod = 30 * time.Second
	// EventRelistDelay gathers a burst of events (a pod's containers starting) into one
	// relist.
	EventRelistDelay = 50 * time.Millisecond
	// eventStreamSettle is how long a new stream must stay open to count as open: a
	// runtime without the RPC fails the first read at once.
	eventStreamSettle = time.Second
	// eventRetryMax caps the back-off between attempts to open the stream.
	eventRetryMax = 30 * time.Second
)

// EventSource streams the runtime's container events: it calls onEvent for each one, with
// the pod's UID when the event names it and the sandbox's or container's ID, until ctx
// ends or the stream fails, and returns why it ended.
type EventSource func(ctx context.Context, onEvent func(uid types.UID, id string)) error

// watchEvents keeps the event stream open until ctx ends, reopening it with back-off. A
// runtime that does not implement the RPC leaves the PLEG relisting every period.
func (p *PLEG) watchEvents(ctx context.Context) {
	logger := klog.FromContext(ctx)
	retry := time.Second
	for ctx.Err() == nil {
		opened := p.cfg.Clock.Now()
		streamCtx, cancel := context.WithCancel(ctx)
		settled := make(chan struct{})
		go func() {
			t := p.cfg.Clock.NewTimer(eventStreamSettle)
			defer t.Stop()
			select {
			case <-t.C():
				p.setEventsOpen(true)
				// One relist now covers what changed before the stream was open; the
				// longer period starts after it.
				p.RelistSoon()
				logger.Info("Container event stream open: relisting every " + EventedRelistPeriod.String())
			case <-streamCtx.Done():
			}
			close(settled)
		}()
		err := p.cfg.Events(streamCtx, p.eventSeen)
		cancel()
		<-settled
		if p.setEventsOpen(false) {
			// Events may have been missed while the stream was down.
			p.RelistSoon()
		}
		if ctx.Err() != nil {
			return
		}
		if status.Code(err) == codes.Unimplemented {
			logger.Info("The container runtime does not stream container events; relisting every " + p.cfg.RelistPeriod.String())
			return
		}
		if p.cfg.Clock.Since(opened) > eventRetryMax {
			retry = time.Second // it was up for a while: a fresh failure
		}
		logger.Info("Container event stream ended; relisting every "+p.cfg.RelistPeriod.String()+" until it is open again", "err", err, "retryIn", retry)
		t := p.cfg.Clock.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		retry = min(retry*2, eventRetryMax)
	}
}

// eventSeen asks for a relist of the event's pod soon after it.
func (p *PLEG) eventSeen(uid types.UID, id string) {
	p.pending.add(uid, id)
	select {
	case p.eventKick <- struct{}{}:
	default:
	}
}

// setEventsOpen records whether the stream is open and says whether it was.
func (p *PLEG) setEventsOpen(open bool) (was bool) {
	was = p.eventsOpen.Swap(open)
	if open != was {
		// The Run loop's period changes with it.
		select {
		case p.periodChanged <- struct{}{}:
		default:
		}
	}
	return was
}

// period is how long the Run loop waits for a relist when nothing asks for one sooner.
func (p *PLEG) period() time.Duration {
	if p.eventsOpen.Load() {
		return max(EventedRelistPeriod, p.cfg.RelistPeriod)
	}
	return p.cfg.RelistPeriod
}
