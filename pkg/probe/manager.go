package probe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// Event reasons, as the kubelet names them.
const (
	EventUnhealthy    = "Unhealthy"
	EventProbeWarning = "ProbeWarning"
)

// Recorder records Kubernetes events (client-go's record.EventRecorder).
type Recorder interface {
	Eventf(object kruntime.Object, eventtype, reason, messageFmt string, args ...interface{})
}

// Config configures a Manager.
type Config struct {
	// Exec runs exec probes and hooks (the CRI client). Required.
	Exec Execer
	// Recorder gets Unhealthy and ProbeWarning events. Required.
	Recorder Recorder
	// OnChange is called, without blocking for long, when a probe's
	// verdict on one of the pod's containers changes.
	OnChange func(uid types.UID)
	// Version is the Kubernetes "major.minor" the agent implements, for
	// the "kube-probe/<version>" User-Agent. Defaults to "1.37".
	Version string
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// Metrics counts and times probe runs; nil records nothing.
	Metrics Metrics
}

// Metrics is told of every probe run (*metrics.Metrics is one).
type Metrics interface {
	// ObserveProbe records one run of a container's probe: kind is
	// Liveness, Readiness or Startup; result successful, failed or unknown.
	ObserveProbe(kind, result string, pod *v1.Pod, container string, d time.Duration)
	// ForgetProbe drops what was recorded of a probe that no longer runs.
	ForgetProbe(kind string, pod *v1.Pod, container string)
}

// Probe results as the metrics spell them.
const (
	metricSuccessful = "successful"
	metricFailed     = "failed"
	metricUnknown    = "unknown"
)

type noMetrics struct{}

func (noMetrics) ObserveProbe(string, string, *v1.Pod, string, time.Duration) {}
func (noMetrics) ForgetProbe(string, *v1.Pod, string)                         {}

// Manager runs the probes of every running container and keeps their
// results by container ID. It also runs lifecycle hooks.
type Manager struct {
	cfg   Config
	check *checker
	// probe runs one probe's handler; tests replace it.
	probe func(ctx context.Context, t Target, p *v1.Probe) (outcome, string, error)

	mu      sync.Mutex
	ctx     context.Context // set by Run
	began   time.Time
	pods    map[types.UID]map[workerKey]*worker
	results map[string]*containerResults
	wg      sync.WaitGroup
}

// containerResults are the verdicts on one container instance.
type containerResults struct {
	Results
	uid        types.UID
	hasStartup bool
}

// NewManager validates cfg and builds a Manager.
func NewManager(cfg Config) (*Manager, error) {
	if cfg.Exec == nil || cfg.Recorder == nil {
		return nil, errors.New("probe: Exec and Recorder are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.OnChange == nil {
		cfg.OnChange = func(types.UID) {}
	}
	if cfg.Version == "" {
		cfg.Version = "1.37"
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	m := &Manager{cfg: cfg, pods: map[types.UID]map[workerKey]*worker{}, results: map[string]*containerResults{}}
	m.check = &checker{exec: cfg.Exec, transport: newTransport(), version: cfg.Version}
	m.probe = m.check.probe
	m.began = cfg.Clock.Now()
	return m, nil
}

// Run starts the probes asked for so far and keeps starting new ones
// until ctx ends; it returns once every probe goroutine has stopped.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	m.ctx = ctx
	for _, ws := range m.pods {
		for _, w := range ws {
			m.launchLocked(w)
		}
	}
	m.mu.Unlock()
	<-ctx.Done()
	m.wg.Wait()
	m.check.transport.CloseIdleConnections()
	return nil
}

func (m *Manager) launchLocked(w *worker) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		w.run(m.ctx)
	}()
}

// UpdatePod starts a probe worker for each probe of each of the pod's
// running containers (app containers and restartable init containers)
// and stops those of containers no longer running. Once the pod is being
// deleted only readiness probes keep running. It never blocks.
func (m *Manager) UpdatePod(pod *v1.Pod, observed *runtime.PodStatus) {
	podIP := pod.Status.PodIP
	if sb := observed.LatestSandbox(); sb != nil && len(sb.IPs) > 0 && !pod.Spec.HostNetwork {
		podIP = sb.IPs[0]
	}
	type want struct {
		spec      *v1.Probe
		c         *v1.Container
		startedAt time.Time
		startup   bool
		initial   Result
	}
	wanted := map[workerKey]want{}
	add := func(c *v1.Container, init bool) {
		var cur *runtime.ContainerStatus
		for _, o := range observed.ContainersNamed(c.Name) {
			if o.Init == init {
				cur = o
				break
			}
		}
		if cur == nil || cur.State != runtime.ContainerRunning {
			return
		}
		for kind, p := range map[Kind]*v1.Probe{Liveness: c.LivenessProbe, Readiness: c.ReadinessProbe, Startup: c.StartupProbe} {
			if p == nil || (pod.DeletionTimestamp != nil && kind != Readiness) {
				continue
			}
			wanted[workerKey{containerID: cur.ID, kind: kind}] = want{spec: p, c: c, startedAt: cur.StartedAt, startup: c.StartupProbe != nil,
				initial: m.initial(pod, kind, cur)}
		}
	}
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			add(c, true)
		}
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i], false)
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	ws := m.pods[pod.UID]
	for key, w := range ws {
		if _, ok := wanted[key]; !ok {
			close(w.stop)
			delete(ws, key)
			if r := m.results[key.containerID]; r != nil {
				r.set(key.kind, Unknown)
			}
		}
	}
	live := map[string]bool{}
	for key, wt := range wanted {
		live[key.containerID] = true
		if _, ok := ws[key]; ok {
			continue
		}
		if ws == nil {
			ws = map[workerKey]*worker{}
			m.pods[pod.UID] = ws
		}
		r := m.results[key.containerID]
		if r == nil {
			r = &containerResults{uid: pod.UID, hasStartup: wt.startup}
			m.results[key.containerID] = r
		}
		r.set(key.kind, wt.initial)
		w := &worker{m: m, key: key, spec: wt.spec, startedAt: wt.startedAt,
			target:  Target{Pod: pod, Container: wt.c, ContainerID: key.containerID, PodIP: podIP},
			jitter:  wt.startedAt.Before(m.began),
			trigger: make(chan struct{}, 1), stop: make(chan struct{})}
		ws[key] = w
		if m.ctx != nil {
			m.launchLocked(w)
		}
	}
	m.dropResultsLocked(pod.UID, live)
	if len(ws) == 0 {
		delete(m.pods, pod.UID)
	}
}

// initial is a new probe's result before it runs. A container that was
// already running when the agent started keeps what the agent last
// reported of it (ready, started) until its probes say otherwise, so that
// restarting the agent does not take pods out of service.
func (m *Manager) initial(pod *v1.Pod, kind Kind, c *runtime.ContainerStatus) Result {
	r := initialResult(kind)
	if !c.StartedAt.Before(m.began) {
		return r
	}
	for _, list := range [][]v1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range list {
			if !strings.HasSuffix(cs.ContainerID, "://"+c.ID) {
				continue
			}
			switch {
			case kind == Readiness && cs.Ready:
				return Success
			case kind == Startup && cs.Started != nil && *cs.Started:
				return Success
			}
		}
	}
	return r
}

// dropResultsLocked forgets the results of the pod's containers that are
// no longer probed.
func (m *Manager) dropResultsLocked(uid types.UID, live map[string]bool) {
	for id, r := range m.results {
		if r.uid == uid && !live[id] {
			delete(m.results, id)
		}
	}
}

// RemovePod stops every probe of the pod and forgets their results.
func (m *Manager) RemovePod(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.pods[uid] {
		close(w.stop)
		m.cfg.Metrics.ForgetProbe(w.key.kind.String(), w.target.Pod, w.target.Container.Name)
	}
	delete(m.pods, uid)
	m.dropResultsLocked(uid, nil)
}

// Results returns the probes' verdicts on a running container; a
// container without probes, or not running, has only Unknown ones.
func (m *Manager) Results(containerID string) Results {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.results[containerID]; r != nil {
		return r.Results
	}
	return Results{}
}

// started says whether the container's startup probe, if it has one,
// has succeeded.
func (m *Manager) started(containerID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.results[containerID]
	return r == nil || !r.hasStartup || r.Startup == Success
}

// setResult records a verdict and tells the pod's worker when it changed.
func (m *Manager) setResult(uid types.UID, key workerKey, v Result) {
	m.mu.Lock()
	r := m.results[key.containerID]
	changed := false
	if r != nil && m.pods[uid][key] != nil {
		changed = r.get(key.kind) != v
		r.set(key.kind, v)
	}
	m.mu.Unlock()
	if changed {
		m.cfg.OnChange(uid)
	}
}

// triggerContainer runs the container's other probes now: its startup
// probe has just succeeded, and readiness need not wait a full period.
func (m *Manager) triggerContainer(containerID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.results[containerID]
	if r == nil {
		return
	}
	for key, w := range m.pods[r.uid] {
		if key.containerID == containerID && key.kind != Startup {
			w.poke()
		}
	}
}

// runProbe runs the worker's probe once and records the event a failure
// or warning gives. ok is false when the probe could not be run at all
// (an error, not a verdict): its run does not count.
func (m *Manager) runProbe(ctx context.Context, w *worker) (Result, bool) {
	t := w.target
	began := m.cfg.Clock.Now()
	out, output, err := m.probe(ctx, t, w.spec)
	ref := containerRef(t.Pod, t.Container)
	kind := w.key.kind
	record := func(result string) {
		m.cfg.Metrics.ObserveProbe(kind.String(), result, t.Pod, t.Container.Name, m.cfg.Clock.Since(began))
	}
	logger := klog.FromContext(ctx).WithValues("probe", kind, "pod", klog.KObj(t.Pod), "podUID", t.Pod.UID, "container", t.Container.Name)
	switch {
	case err != nil:
		if ctx.Err() != nil {
			return Unknown, false
		}
		record(metricUnknown)
		logger.V(1).Info("Probe errored", "err", err.Error())
		m.cfg.Recorder.Eventf(ref, v1.EventTypeWarning, EventUnhealthy, "%s probe errored and resulted in %s state: %s", kind, Unknown, err)
		return Unknown, false
	case out == outcomeFailure:
		record(metricFailed)
		logger.V(1).Info("Probe failed", "output", output)
		m.cfg.Recorder.Eventf(ref, v1.EventTypeWarning, EventUnhealthy, "%s probe failed: %s", kind, output)
		return Failure, true
	case out == outcomeWarning:
		m.cfg.Recorder.Eventf(ref, v1.EventTypeWarning, EventProbeWarning, "%s probe warning: %s", kind, output)
	}
	record(metricSuccessful)
	logger.V(4).Info("Probe succeeded")
	return Success, true
}

// containerRef is the object events about one container refer to.
func containerRef(pod *v1.Pod, c *v1.Container) *v1.ObjectReference {
	field := fmt.Sprintf("spec.containers{%s}", c.Name)
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == c.Name {
			field = fmt.Sprintf("spec.initContainers{%s}", c.Name)
		}
	}
	return &v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name,
		UID: pod.UID, ResourceVersion: pod.ResourceVersion, FieldPath: field}
}
