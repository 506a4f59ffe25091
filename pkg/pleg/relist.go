package pleg

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// DefaultRelistPeriod is how often the runtime is relisted.
const DefaultRelistPeriod = time.Second

// Runtime is what the PLEG reads from the container runtime.
type Runtime interface {
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	PodSandboxStatus(ctx context.Context, podSandboxID string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error)
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error)
}

// Config configures a PLEG.
type Config struct {
	// Runtime is relisted.
	Runtime Runtime
	// Clock stamps relists; defaults to the real clock.
	Clock clock.WithTicker
	// RelistPeriod defaults to DefaultRelistPeriod.
	RelistPeriod time.Duration
	// OnChange is called, from the relist goroutine, with every pod whose
	// runtime state changed. It must not block.
	OnChange func(runtime.PodRef)
	// Metrics records relists; nil records nothing.
	Metrics Metrics
	// Events, when set, is the runtime's container event stream (events.go): the
	// primary signal, the relist then the fallback.
	Events EventSource
}

// Metrics is told of every relist (*metrics.Metrics is one).
type Metrics interface {
	// ObserveRelist records how long a relist took, how long after the
	// one before it started (zero for the first) and when it ended.
	ObserveRelist(duration, interval time.Duration, at time.Time)
	// SetRuntimeCounts records what the relist found: pods with a ready
	// sandbox, and containers by state (created, running, exited, unknown).
	SetRuntimeCounts(runningPods int, containersByState map[string]int)
}

type noMetrics struct{}

func (noMetrics) ObserveRelist(time.Duration, time.Duration, time.Time) {}
func (noMetrics) SetRuntimeCounts(int, map[string]int)                  {}

// PLEG relists the runtime, keeps the Cache, and reports changed pods.
type PLEG struct {
	cfg   Config
	cache *Cache
	kick  chan struct{}
	// eventKick is sent to on a container event, periodChanged when the event stream
	// opens or closes (events.go).
	eventKick     chan struct{}
	periodChanged chan struct{}
	eventsOpen    atomic.Bool
	// podKick is sent to when a worker asks for its pod (RelistPod); pending holds the
	// pods asked for and the events seen since the last relist (podrelist.go).
	podKick chan struct{}
	pending pending
	// Details read per object, reused while the object is unchanged.
	sandboxes  map[string]sandboxEntry
	containers map[string]containerEntry
	relistedAt time.Time
	// lastStart is when the previous relist started.
	lastStart time.Time
}

// The entries keep of a status what the relist reads of it (kept): the
// runtime's whole answers (labels, annotations, mounts, namespace options)
// were 6 KB a pod of the agent's live heap.
type sandboxEntry struct {
	state runtimeapi.PodSandboxState
	st    *runtimeapi.PodSandboxStatus // kept; nil when it could not be read
	pod   types.UID
}

type containerEntry struct {
	state runtimeapi.ContainerState
	st    *runtimeapi.ContainerStatus // kept; nil when it could not be read
	pod   types.UID
	// message is an exited container's termination message, read once.
	message string
}

// keptSandbox is what SandboxFromCRI reads of a sandbox's status: its
// addresses.
func keptSandbox(st *runtimeapi.PodSandboxStatus) *runtimeapi.PodSandboxStatus {
	if st == nil {
		return nil
	}
	out := &runtimeapi.PodSandboxStatus{}
	if n := st.GetNetwork(); n != nil {
		out.Network = &runtimeapi.PodSandboxNetworkStatus{Ip: n.GetIp(), AdditionalIps: n.GetAdditionalIps()}
	}
	return out
}

// keptContainer is what ContainerFromCRI reads of a container's status.
func keptContainer(st *runtimeapi.ContainerStatus) *runtimeapi.ContainerStatus {
	if st == nil {
		return nil
	}
	out := &runtimeapi.ContainerStatus{
		State: st.GetState(), StartedAt: st.GetStartedAt(), FinishedAt: st.GetFinishedAt(),
		ExitCode: st.GetExitCode(), Reason: st.GetReason(), Message: st.GetMessage(),
		ImageRef: st.GetImageRef(),
	}
	if img := st.GetImage().GetImage(); img != "" {
		out.Image = &runtimeapi.ImageSpec{Image: img}
	}
	if u := st.GetUser().GetLinux(); u != nil {
		out.User = &runtimeapi.ContainerUser{Linux: &runtimeapi.LinuxContainerUser{
			Uid: u.GetUid(), Gid: u.GetGid(), SupplementalGroups: u.GetSupplementalGroups(),
		}}
	}
	return out
}

// New builds a PLEG.
func New(cfg Config) (*PLEG, error) {
	if cfg.Runtime == nil {
		return nil, errors.New("pleg: Runtime is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.RelistPeriod <= 0 {
		cfg.RelistPeriod = DefaultRelistPeriod
	}
	if cfg.OnChange == nil {
		cfg.OnChange = func(runtime.PodRef) {}
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	return &PLEG{cfg: cfg, cache: newCache(), kick: make(chan struct{}, 1),
		eventKick: make(chan struct{}, 1), periodChanged: make(chan struct{}, 1), podKick: make(chan struct{}, 1),
		sandboxes: map[string]sandboxEntry{}, containers: map[string]containerEntry{}}, nil
}

// Cache returns the pod cache the PLEG keeps.
func (p *PLEG) Cache() *Cache { return p.cache }

// RelistSoon asks for a relist now rather than at the next period.
func (p *PLEG) RelistSoon() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// healthThreshold is how long the PLEG may go without a relist before the
// node is not Ready, as the kubelet's.
const healthThreshold = 3 * time.Minute

// Healthy says why the PLEG is not healthy, in the kubelet's words, or nil
// when a relist has completed within the last three minutes. The node's
// readiness includes it.
func (p *PLEG) Healthy() error {
	t := p.cache.wholeStamp()
	if t.IsZero() {
		return errors.New("pleg has yet to be successful")
	}
	if since := p.cfg.Clock.Since(t); since > healthThreshold {
		return fmt.Errorf("pleg was last seen active %v ago; threshold is %v", since, healthThreshold)
	}
	return nil
}

// Run relists until ctx ends: the whole runtime every period and when asked
// (RelistSoon); the pods a worker asks for (RelistPod) at once, and those of container
// events (Config.Events) within EventRelistDelay, each pod alone (podrelist.go).
func (p *PLEG) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("pleg")
	ctx = klog.NewContext(ctx, logger)
	if p.cfg.Events != nil {
		go p.watchEvents(ctx)
	}
	whole := true
	for {
		if whole {
			if err := p.Relist(ctx); err != nil && ctx.Err() == nil {
				logger.Error(err, "Relist failed")
			}
		} else if err := p.relistPending(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "Relist of pods failed")
		}
		var ok bool
		if whole, ok = p.wait(ctx); !ok {
			return nil
		}
	}
}

// wait blocks until the next relist is due, and says whether it is of the whole runtime:
// the period has passed since the last one ended, or RelistSoon asked; or of the pending
// pods only: a worker asked for its pod, or EventRelistDelay has passed since a container
// event. It is not ok once ctx ends.
func (p *PLEG) wait(ctx context.Context) (whole, ok bool) {
	t := p.cfg.Clock.NewTimer(p.period())
	defer func() { t.Stop() }()
	var delay <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return false, false
		case <-t.C():
			return true, true
		case <-p.kick:
			return true, true
		case <-p.podKick:
			return false, true
		case <-p.eventKick:
			if delay == nil {
				d := p.cfg.Clock.NewTimer(EventRelistDelay)
				defer d.Stop()
				delay = d.C()
			}
		case <-delay:
			return false, true
		case <-p.periodChanged:
			t.Stop()
			t = p.cfg.Clock.NewTimer(p.period())
		}
	}
}

// Relist reads the runtime once, updates the cache and reports changes.
func (p *PLEG) Relist(ctx context.Context) error {
	start := p.cfg.Clock.Now()
	// What was asked for before the start is in this relist.
	p.pending.take()
	sbs, err := p.cfg.Runtime.ListPodSandbox(ctx, nil)
	if err != nil {
		return fmt.Errorf("relist: %w", err)
	}
	cs, err := p.cfg.Runtime.ListContainers(ctx, nil)
	if err != nil {
		return fmt.Errorf("relist: %w", err)
	}
	seenSB, seenC := map[string]sandboxEntry{}, map[string]containerEntry{}
	pods := p.collect(ctx, sbs, cs, seenSB, seenC)
	old := p.cache.all()
	p.sandboxes, p.containers = seenSB, seenC
	p.cache.set(pods, start)
	p.observe(start, pods)
	for uid, s := range pods {
		if !sameState(old[uid], s) {
			p.cfg.OnChange(s.PodRef)
		}
	}
	for uid, s := range old {
		if _, ok := pods[uid]; !ok {
			p.cfg.OnChange(s.PodRef)
		}
	}
	return nil
}

// collect reads the status of each sandbox and container listed whose state changed since
// the PLEG last saw it (an exited container's termination message once), reusing what it
// read before for the others, and groups them by pod. Every entry is recorded in seenSB
// and seenC. Objects without the agent's labels are not a pod's.
func (p *PLEG) collect(ctx context.Context, sbs []*runtimeapi.PodSandbox, cs []*runtimeapi.Container,
	seenSB map[string]sandboxEntry, seenC map[string]containerEntry) map[types.UID]*runtime.PodStatus {
	pods := map[types.UID]*runtime.PodStatus{}
	podOf := func(ref runtime.PodRef) *runtime.PodStatus {
		s, ok := pods[ref.UID]
		if !ok {
			s = &runtime.PodStatus{PodRef: ref}
			pods[ref.UID] = s
		}
		return s
	}
	for _, sb := range sbs {
		e, ok := p.sandboxes[sb.GetId()]
		if !ok || e.state != sb.GetState() {
			e = sandboxEntry{state: sb.GetState()}
			if resp, err := p.cfg.Runtime.PodSandboxStatus(ctx, sb.GetId(), false); err == nil && resp.GetStatus() != nil {
				e.st = keptSandbox(resp.GetStatus())
				e.pod = types.UID(resp.GetStatus().GetLabels()[runtime.LabelPodUID])
			}
		}
		seenSB[sb.GetId()] = e
		if s, ref, ok := runtime.SandboxFromCRI(sb, e.st); ok {
			podOf(ref).Sandboxes = append(podOf(ref).Sandboxes, s)
		}
	}
	for _, c := range cs {
		e, ok := p.containers[c.GetId()]
		if !ok || e.state != c.GetState() || e.st == nil {
			e = containerEntry{state: c.GetState()}
			if resp, err := p.cfg.Runtime.ContainerStatus(ctx, c.GetId(), false); err == nil && resp.GetStatus() != nil {
				e.st = keptContainer(resp.GetStatus())
				e.pod = types.UID(resp.GetStatus().GetLabels()[runtime.LabelPodUID])
				e.message = runtime.TerminationMessage(resp.GetStatus())
			}
		}
		seenC[c.GetId()] = e
		if s, ref, ok := runtime.ContainerFromCRI(c, e.st); ok {
			s.TerminationMessage = e.message
			podOf(ref).Containers = append(podOf(ref).Containers, s)
		}
	}
	for _, s := range pods {
		s.SortNewestFirst()
	}
	return pods
}

// observe records the relist's duration and interval and what it found.
func (p *PLEG) observe(start time.Time, pods map[types.UID]*runtime.PodStatus) {
	end := p.cfg.Clock.Now()
	var interval time.Duration
	if !p.lastStart.IsZero() {
		interval = start.Sub(p.lastStart)
	}
	p.lastStart = start
	p.cfg.Metrics.ObserveRelist(end.Sub(start), interval, end)
	p.countRuntime(maps.Values(pods))
}

// countRuntime records the pods with a ready sandbox and the containers by state.
func (p *PLEG) countRuntime(pods iter.Seq[*runtime.PodStatus]) {
	running := 0
	states := map[string]int{}
	for s := range pods {
		for _, sb := range s.Sandboxes {
			if sb.Ready {
				running++
				break
			}
		}
		for _, c := range s.Containers {
			states[string(c.State)]++
		}
	}
	p.cfg.Metrics.SetRuntimeCounts(running, states)
}

// sameState says whether a worker would see no change from a to b: the identity and state
// of each sandbox and container (its readiness and addresses for a sandbox) are the same.
func sameState(a, b *runtime.PodStatus) bool {
	if a == nil || b == nil {
		return a == b
	}
	if len(a.Sandboxes) != len(b.Sandboxes) || len(a.Containers) != len(b.Containers) {
		return false
	}
	for i, x := range a.Sandboxes {
		y := b.Sandboxes[i]
		if x.ID != y.ID || x.Ready != y.Ready || !slices.Equal(x.IPs, y.IPs) {
			return false
		}
	}
	for i, x := range a.Containers {
		y := b.Containers[i]
		if x.ID != y.ID || x.State != y.State {
			return false
		}
	}
	return true
}
