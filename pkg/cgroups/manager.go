package cgroups

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"

	occgroups "github.com/opencontainers/cgroups"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/qos"
)

// DefaultMount is where the host's cgroup filesystems are mounted.
const DefaultMount = "/sys/fs/cgroup"

// ErrBusy is returned when a pod cgroup still holds processes; they have
// been sent SIGKILL and the removal should be retried.
var ErrBusy = errors.New("pod cgroup still has processes")

// Config configures a Manager.
type Config struct {
	// Root is cgroupRoot, the cgroup the kubepods hierarchy is made
	// under; empty is the root of the hierarchy.
	Root string
	// Driver is cgroupDriver: cgroupfs (the default) or systemd. It
	// decides the names; cgroups are written through the filesystem
	// either way.
	Driver string
	// Mount is where the cgroup filesystems are mounted; empty is
	// DefaultMount.
	Mount string
	// Unified says whether Mount is a cgroup v2 hierarchy; nil detects it.
	Unified *bool
	// Pod shapes every pod cgroup (CFS quota, period, pids limit).
	Pod PodOptions
	// NodeLimits bound the kubepods cgroup: node allocatable when
	// enforceNodeAllocatable has "pods", else the node's capacity.
	NodeLimits v1.ResourceList
	// Kill kills a process left in a pod cgroup being removed; nil means
	// SIGKILL.
	Kill func(pid int) error
}

// Manager keeps the kubepods hierarchy and the pod cgroups in it. It is
// safe for concurrent use by the pod workers.
type Manager struct {
	cfg      Config
	fs       hierarchy
	kubepods name

	mu        sync.Mutex
	pods      map[types.UID]podEntry
	burstable *uint64 // cpu.shares last written to the burstable cgroup
}

// podEntry is what the manager last applied to a pod's cgroup.
type podEntry struct {
	path     string
	class    v1.PodQOSClass
	cpuMilli int64
	res      Resources
}

// New validates cfg and builds a Manager. It touches nothing until Start.
func New(cfg Config) (*Manager, error) {
	switch cfg.Driver {
	case "":
		cfg.Driver = DriverCgroupfs
	case DriverCgroupfs, DriverSystemd:
	default:
		return nil, fmt.Errorf("cgroups: unknown cgroup driver %q", cfg.Driver)
	}
	if cfg.Mount == "" {
		cfg.Mount = DefaultMount
	}
	if cfg.Unified == nil {
		unified := false
		if cfg.Mount == DefaultMount {
			unified = occgroups.IsCgroup2UnifiedMode()
		} else {
			_, err := os.Stat(filepath.Join(cfg.Mount, "cgroup.controllers"))
			unified = err == nil
		}
		cfg.Unified = &unified
	}
	if cfg.Kill == nil {
		cfg.Kill = func(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
	}
	m := &Manager{cfg: cfg, kubepods: rootName(cfg.Root, cfg.Driver).child(kubepodsName), pods: map[types.UID]podEntry{}}
	if *cfg.Unified {
		m.fs = unifiedFS{mount: cfg.Mount, rmdir: sysRmdir}
	} else {
		m.fs = legacyFS{mount: cfg.Mount, rmdir: sysRmdir}
	}
	return m, nil
}

func (m *Manager) path(n name) string { return n.path(m.cfg.Driver) }

// KubepodsPath is the kubepods cgroup's path below the mount point.
func (m *Manager) KubepodsPath() string { return m.path(m.kubepods) }

// Start makes the kubepods cgroup, bounded by the node limits, and its
// burstable and besteffort QoS cgroups.
func (m *Manager) Start(ctx context.Context) error {
	kp := m.path(m.kubepods)
	if err := m.fs.create(kp); err != nil {
		return fmt.Errorf("create kubepods cgroup: %w", err)
	}
	if err := m.fs.set(kp, NodeResources(m.cfg.NodeLimits)); err != nil {
		return fmt.Errorf("enforce node allocatable on %s: %w", kp, err)
	}
	min := uint64(qos.MinShares)
	for _, c := range []string{burstableName, besteffortName} {
		p := m.path(m.kubepods.child(c))
		if err := m.fs.create(p); err != nil {
			return fmt.Errorf("create QoS cgroup: %w", err)
		}
		if err := m.fs.set(p, Resources{CPUShares: &min}); err != nil {
			return fmt.Errorf("set QoS cgroup %s: %w", p, err)
		}
	}
	m.mu.Lock()
	m.burstable = nil
	err := m.updateBurstableLocked()
	m.mu.Unlock()
	klog.FromContext(ctx).Info("Made the QoS cgroups", "kubepods", kp, "driver", m.cfg.Driver, "unified", *m.cfg.Unified)
	return err
}

// PodCgroup is the pod's cgroup path, which is also the cgroup parent
// the runtime is given for its sandbox.
func (m *Manager) PodCgroup(pod *v1.Pod) (string, error) {
	parent, err := qosParent(m.kubepods, qos.Class(pod))
	if err != nil {
		return "", err
	}
	return m.path(parent.child(podCgroupName(pod.UID))), nil
}

// EnsurePod makes the pod's cgroup with its limits, unless it is there
// already with them, and counts the pod in its QoS cgroup. It returns
// the cgroup's path.
func (m *Manager) EnsurePod(ctx context.Context, pod *v1.Pod) (string, error) {
	return m.applyPod(ctx, pod, true)
}

// SettlePod brings the pod's cgroup to exactly what the pod asks for now.
// EnsurePod only ever raises the limits of an existing pod cgroup, so
// that the containers of a pod being resized are never squeezed under a
// pod limit they have not been brought to yet; once they have, SettlePod
// lowers what was to be lowered. A pod whose cgroup is as asked is left
// alone.
func (m *Manager) SettlePod(ctx context.Context, pod *v1.Pod) error {
	_, err := m.applyPod(ctx, pod, false)
	return err
}

// applyPod makes the pod's cgroup and writes its limits; with widen, the
// limits of a cgroup the manager already wrote are only raised (see
// SettlePod).
func (m *Manager) applyPod(ctx context.Context, pod *v1.Pod, widen bool) (string, error) {
	e, err := m.entry(pod)
	if err != nil {
		return "", err
	}
	p := e.path
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.currentLocked(pod.UID, &e, widen) {
		return p, nil
	}
	if err := m.fs.create(p); err != nil {
		return "", err
	}
	if err := m.fs.set(p, e.res); err != nil {
		return "", err
	}
	m.pods[pod.UID] = e
	klog.FromContext(ctx).V(2).Info("Pod cgroup ready", "cgroup", p, "qosClass", e.class)
	if err := m.updateBurstableLocked(); err != nil {
		klog.FromContext(ctx).Info("Updating the burstable QoS cgroup failed", "err", err.Error())
	}
	return p, nil
}

// PodReady is the pod's cgroup path and true when EnsurePod would do
// nothing: the cgroup the manager made is there with the limits the pod
// asks for (or wider, while it is resized). A running pod's resync asks
// this first, so that it costs one stat and no step.
func (m *Manager) PodReady(pod *v1.Pod) (string, bool) {
	e, err := m.entry(pod)
	if err != nil {
		return "", false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return e.path, m.currentLocked(pod.UID, &e, true)
}

// entry is what applying the pod's cgroup writes.
func (m *Manager) entry(pod *v1.Pod) (podEntry, error) {
	p, err := m.PodCgroup(pod)
	if err != nil {
		return podEntry{}, err
	}
	e := podEntry{path: p, class: qos.Class(pod), res: PodResources(pod, m.cfg.Pod)}
	if e.class == v1.PodQOSBurstable {
		e.cpuMilli = podCPURequest(pod)
	}
	return e, nil
}

// currentLocked says whether the pod's cgroup is there with e applied.
// With widen, e's limits become the looser of e's and those last written
// (see SettlePod) when the cgroup is there at the same path.
func (m *Manager) currentLocked(uid types.UID, e *podEntry, widen bool) bool {
	old, known := m.pods[uid]
	if !known || !m.fs.exists(e.path) {
		return false
	}
	if widen && old.path == e.path {
		e.res = widened(old.res, e.res)
	}
	return reflect.DeepEqual(old, *e)
}

// RemovePod removes the pod's cgroup, wherever it is. Processes left in
// it are killed and ErrBusy returned, so that a later call finishes the
// removal; a cgroup that is gone already is success.
func (m *Manager) RemovePod(ctx context.Context, uid types.UID) error {
	var errs []error
	for _, class := range []v1.PodQOSClass{v1.PodQOSGuaranteed, v1.PodQOSBurstable, v1.PodQOSBestEffort} {
		parent, _ := qosParent(m.kubepods, class)
		p := m.path(parent.child(podCgroupName(uid)))
		if !m.fs.exists(p) {
			continue
		}
		pids, err := m.fs.procs(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("list processes of %s: %w", p, err))
			continue
		}
		if len(pids) > 0 {
			for _, pid := range pids {
				_ = m.cfg.Kill(pid)
			}
			errs = append(errs, fmt.Errorf("%s: %d processes: %w", p, len(pids), ErrBusy))
			continue
		}
		if err := m.fs.remove(p); err != nil {
			errs = append(errs, err)
			continue
		}
		klog.FromContext(ctx).V(2).Info("Pod cgroup removed", "cgroup", p)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.pods[uid]; ok {
		delete(m.pods, uid)
		return m.updateBurstableLocked()
	}
	return nil
}

// HasPod says whether a cgroup of the pod is there, under any QoS class.
func (m *Manager) HasPod(uid types.UID) bool {
	for _, class := range []v1.PodQOSClass{v1.PodQOSGuaranteed, v1.PodQOSBurstable, v1.PodQOSBestEffort} {
		parent, _ := qosParent(m.kubepods, class)
		if m.fs.exists(m.path(parent.child(podCgroupName(uid)))) {
			return true
		}
	}
	return false
}

// PodUIDs lists the pods that have a cgroup on the host, whether the
// manager made it in this run or not: after a restart, a pod deleted
// while the agent was down still has one to remove.
func (m *Manager) PodUIDs() ([]types.UID, error) {
	var out []types.UID
	for _, class := range []v1.PodQOSClass{v1.PodQOSGuaranteed, v1.PodQOSBurstable, v1.PodQOSBestEffort} {
		parent, _ := qosParent(m.kubepods, class)
		names, err := m.fs.children(m.path(parent))
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			n = strings.TrimSuffix(n, systemdSuffix)
			if i := strings.LastIndex(n, "-"+podPrefix); m.cfg.Driver == DriverSystemd && i >= 0 {
				n = strings.ReplaceAll(n[i+1:], "_", "-")
			}
			if uid, ok := strings.CutPrefix(n, podPrefix); ok && uid != "" {
				out = append(out, types.UID(uid))
			}
		}
	}
	return out, nil
}

// updateBurstableLocked writes the burstable cgroup's cpu.shares when the
// sum of the Burstable pods' cpu requests changed.
func (m *Manager) updateBurstableLocked() error {
	var reqs []int64
	for _, e := range m.pods {
		if e.class == v1.PodQOSBurstable {
			reqs = append(reqs, e.cpuMilli)
		}
	}
	shares := burstableShares(reqs)
	if m.burstable != nil && *m.burstable == shares {
		return nil
	}
	p := m.path(m.kubepods.child(burstableName))
	if err := m.fs.set(p, Resources{CPUShares: &shares}); err != nil {
		return err
	}
	m.burstable = &shares
	return nil
}

// podCPURequest is the pod's cpu request in millicores (pod-level when set).
func podCPURequest(pod *v1.Pod) int64 {
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	return reqs.Cpu().MilliValue()
}

// EnforceReserved bounds an existing cgroup (kubeReservedCgroup,
// systemReservedCgroup) by a reservation: cpu shares and, unless only
// the compressible resources are enforced, memory, pids and huge pages.
func (m *Manager) EnforceReserved(ctx context.Context, cgroup string, reserved v1.ResourceList, compressibleOnly bool) error {
	p := m.path(rootName(cgroup, m.cfg.Driver))
	if !m.fs.exists(p) {
		return fmt.Errorf("cgroup %q does not exist", cgroup)
	}
	r := NodeResources(reserved)
	if compressibleOnly {
		r = Resources{CPUShares: r.CPUShares}
	}
	if err := m.fs.set(p, r); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Enforced a reservation", "cgroup", p, "reserved", reserved, "compressibleOnly", compressibleOnly)
	return nil
}
