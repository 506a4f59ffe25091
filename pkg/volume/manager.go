// Package volume sets up and tears down pods' volumes on the node.
//
// The Manager is level-triggered like the rest of the agent: the pod worker
// calls MountPod on every sync, which compares what the pod wants with what
// is on disk and in the mount table and fixes the difference (a configMap
// change, a token due for refresh, a tmpfs lost to a reboot). Nothing is
// kept in memory that the disk cannot give back after a restart, but for
// credentials (tokens, pod certificates and their keys), which a restarted
// agent requests anew.
package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/kube"
	"github.com/nodeagent/nodeagent/pkg/poddir"
	"github.com/nodeagent/nodeagent/pkg/volume/csi"
)

// Config configures a Manager.
type Config struct {
	// RootDir is the agent's root directory (the kubelet's --root-dir,
	// usually /var/lib/kubelet). Required.
	RootDir string
	// Client reads configMaps, secrets and cluster trust bundles, requests
	// service-account tokens and pod certificates. Without it those
	// volumes fail.
	Client kube.Interface
	// Objects serves the configMaps and secrets of configMap, secret and
	// projected volumes, read again at every refresh: a watch-fed cache
	// (pkg/objcache) makes a refresh where nothing changed cost the
	// apiserver nothing. Defaults to a GET through Client at every read.
	Objects Objects
	// NodeName is this node's name: CSI volumes' attachments are named
	// after it, and pod certificate requests name it.
	NodeName types.NodeName
	// CSIDrivers holds the CSI drivers registered on this node. Without it
	// persistentVolumeClaim, ephemeral and csi volumes are unsupported.
	CSIDrivers *csi.Registry
	// Clock times token and pod certificate refreshes. Defaults to the
	// real clock.
	Clock clock.PassiveClock
	// Allocatable returns the node's allocatable resources: the default
	// for downward API limits a container does not set and the bound of a
	// memory-backed emptyDir. Defaults to none.
	Allocatable func() v1.ResourceList
	// HugePagesDir lists the host's huge page sizes. Defaults to
	// /sys/kernel/mm/hugepages.
	HugePagesDir string
	// ClaimCheckPeriod is how often RunExpansion reads the claims of
	// published CSI volumes to learn that one grew. Defaults to
	// DefaultClaimCheckPeriod.
	ClaimCheckPeriod time.Duration
	// Node returns this node's Node as a watch-fed cache holds it (an
	// informer's lister), or an error while it has none. Set it when the
	// attach/detach controller manages the node's attachments
	// (enableControllerAttachDetach, the default): a CSI volume that
	// needs attaching is then staged only once the Node's status lists it
	// in use and attached, as the kubelet does. Without it only the
	// VolumeAttachment is waited for.
	Node func() (*v1.Node, error)
	// Recorder records the events of volume expansion, on the pod and the
	// claim. Defaults to none: the events are dropped.
	Recorder Recorder

	// mounter replaces the kernel in tests.
	mounter mounter
	// expandClock times the expansion's looks and back-offs in tests.
	expandClock clock.Clock
}

// Manager sets up and tears down the volumes of the pods on this node.
type Manager struct {
	layout  poddir.Layout
	plugins []plugin
	mounter mounter
	tokens  *tokenSource
	certs   *podCertSource
	// published is what the API-data volumes hold (published.go).
	published *publishedPayloads
	expand    *expander // nil without CSI
	log       klog.Logger

	mu   sync.Mutex
	pods map[types.UID]*podLock
}

// podLock serialises one pod's mounts and unmounts; it is never held by
// another pod, so a slow volume is slow alone. users counts the callers
// holding or waiting for it; the last one out drops it from the map.
type podLock struct {
	sync.Mutex
	users int
}

// NewManager validates cfg and returns a Manager.
func NewManager(cfg Config) (*Manager, error) {
	if cfg.RootDir == "" || !filepath.IsAbs(cfg.RootDir) {
		return nil, fmt.Errorf("volume manager: RootDir must be an absolute path, got %q", cfg.RootDir)
	}
	// The mount table shows resolved paths; a symlinked root dir must
	// resolve the same way for mounts to be found.
	if resolved, err := filepath.EvalSymlinks(cfg.RootDir); err == nil {
		cfg.RootDir = resolved
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Allocatable == nil {
		cfg.Allocatable = func() v1.ResourceList { return nil }
	}
	if cfg.HugePagesDir == "" {
		cfg.HugePagesDir = "/sys/kernel/mm/hugepages"
	}
	if cfg.mounter == nil {
		cfg.mounter = kernelMounter{}
	}
	objects := newObjectSource(cfg.Objects, cfg.Client)
	tokens := newTokenSource(cfg.Client, cfg.Clock)
	certs := newPodCertSource(cfg.Client, cfg.NodeName, cfg.Clock)
	allocMemory := func() *resource.Quantity {
		if q, ok := cfg.Allocatable()[v1.ResourceMemory]; ok {
			return &q
		}
		return nil
	}
	m := &Manager{
		layout:    poddir.New(cfg.RootDir),
		mounter:   cfg.mounter,
		tokens:    tokens,
		certs:     certs,
		published: &publishedPayloads{},
		pods:      map[types.UID]*podLock{},
		plugins: []plugin{
			&emptyDirPlugin{mounter: cfg.mounter, allocatableMemory: allocMemory, hugePagesDir: cfg.HugePagesDir},
			hostPathPlugin{},
			imagePlugin{},
			newConfigMapPlugin(objects, cfg.mounter),
			newSecretPlugin(objects, cfg.mounter),
			newDownwardAPIPlugin(cfg.Allocatable, cfg.mounter),
			newProjectedPlugin(&projectedPayload{objects: objects, tokens: tokens, podCerts: certs, allocatable: cfg.Allocatable}, cfg.mounter),
		},
	}
	for _, p := range m.plugins {
		if a, ok := p.(*apiDataPlugin); ok {
			a.published = m.published
		}
	}
	if cfg.Recorder == nil {
		cfg.Recorder = noRecorder{}
	}
	if cfg.CSIDrivers != nil {
		csiP := newCSIPlugin(cfg.Client, tokens, cfg.CSIDrivers, string(cfg.NodeName), m.layout, cfg.mounter)
		csiP.node = cfg.Node
		if cfg.Client != nil {
			if cfg.expandClock == nil {
				cfg.expandClock = clock.RealClock{}
			}
			m.expand = newExpander(csiP, cfg.Client, cfg.Recorder, cfg.expandClock, cfg.ClaimCheckPeriod)
			csiP.expand = m.expand
		}
		m.plugins = append(m.plugins, csiP)
	}
	return m, nil
}

// RunExpansion grows the published CSI volumes of claims whose size grew
// (online expansion, NodeExpandVolume), recording its events with the
// Recorder, until ctx ends. Without CSI drivers or an API client it only
// waits. (Volumes whose claim grew while no pod used them are grown as
// they are published, by MountPod.)
func (m *Manager) RunExpansion(ctx context.Context) error {
	if m.expand == nil {
		<-ctx.Done()
		return nil
	}
	return m.expand.run(ctx)
}

func (m *Manager) lockPod(uid types.UID) func() {
	m.mu.Lock()
	l, ok := m.pods[uid]
	if !ok {
		l = &podLock{}
		m.pods[uid] = l
	}
	l.users++
	m.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		m.mu.Lock()
		l.users--
		if l.users == 0 {
			delete(m.pods, uid)
		}
		m.mu.Unlock()
	}
}

// MountPod creates the pod's directories and sets up every volume in
// pod.spec.volumes, returning per volume name what containers bind. Call it
// on every sync of a running pod: it is idempotent, never remounts, and
// refreshes configMap, secret, downward API and token contents. On error
// the Mounts hold the volumes that did succeed and the error names each
// volume that failed (a *MountError each, joined), fit for a FailedMount
// event; the pod must not start until MountPod returns nil.
func (m *Manager) MountPod(ctx context.Context, pod *v1.Pod) (Mounts, error) {
	if !poddir.ValidUID(pod.UID) {
		return nil, fmt.Errorf("pod %s/%s has an invalid UID %q", pod.Namespace, pod.Name, pod.UID)
	}
	log := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "podUID", pod.UID)
	unlock := m.lockPod(pod.UID)
	defer unlock()

	if err := m.ensurePodDirs(pod.UID); err != nil {
		return nil, err
	}
	var fsGroup *int64
	var fsGroupPolicy *v1.PodFSGroupChangePolicy
	if sc := pod.Spec.SecurityContext; sc != nil {
		fsGroup, fsGroupPolicy = sc.FSGroup, sc.FSGroupChangePolicy
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Volumes are set up side by side, as the kubelet's operations run: a
	// slow one (a CSI driver's NodePublishVolume) delays no other.
	results := make([]Mount, len(pod.Spec.Volumes))
	errs := make([]error, len(pod.Spec.Volumes))
	var wg sync.WaitGroup
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		p := m.pluginFor(vol)
		if p == nil {
			errs[i] = &MountError{Volume: vol.Name, Err: errUnsupported}
			continue
		}
		wg.Go(func() {
			start := time.Now()
			mnt, err := p.setUp(ctx, &setUpRequest{
				pod:           pod,
				vol:           vol,
				dir:           m.layout.Pod(pod.UID).VolumeDir(p.name(), vol.Name),
				fsGroup:       fsGroup,
				fsGroupPolicy: fsGroupPolicy,
			})
			if err != nil {
				log.V(2).Info("Volume set up failed", "volume", vol.Name, "plugin", p.name(), "err", err)
				errs[i] = &MountError{Volume: vol.Name, Err: err}
				return
			}
			log.V(5).Info("Volume set up", "volume", vol.Name, "plugin", p.name(), "duration", time.Since(start))
			results[i] = mnt
		})
	}
	wg.Wait()
	mounts := make(Mounts, len(pod.Spec.Volumes))
	for i := range pod.Spec.Volumes {
		if errs[i] == nil {
			mounts[pod.Spec.Volumes[i].Name] = results[i]
		}
	}
	return mounts, errors.Join(errs...)
}

func (m *Manager) pluginFor(vol *v1.Volume) plugin {
	for _, p := range m.plugins {
		if p.canSupport(vol) {
			return p
		}
	}
	return nil
}

func (m *Manager) pluginByName(name string) plugin {
	for _, p := range m.plugins {
		if p.name() == name {
			return p
		}
	}
	return nil
}

func (m *Manager) ensurePodDirs(uid types.UID) error {
	pd := m.layout.Pod(uid)
	for _, dir := range []string{pd.Dir(), pd.VolumesDir(), pd.PluginsDir(), pd.ContainersDir()} {
		if err := os.MkdirAll(dir, poddir.DirMode); err != nil {
			return fmt.Errorf("create pod directory: %w", err)
		}
	}
	return nil
}

// NextRefresh is when the pod's volumes next need a sync for a token or
// pod certificate refresh; false when nothing is due. The worker may
// schedule a wake-up.
func (m *Manager) NextRefresh(uid types.UID) (time.Time, bool) {
	next, ok := m.tokens.nextRefresh(uid)
	if t, certOK := m.certs.nextRefresh(uid); certOK && (!ok || t.Before(next)) {
		next, ok = t, true
	}
	return next, ok
}

// VolumesInUse lists the node's attachable volumes that are mounted or
// being mounted, for the Node's status.volumesInUse.
func (m *Manager) VolumesInUse() []v1.UniqueVolumeName {
	if p, ok := m.pluginByName(csiPluginName).(*csiPlugin); ok {
		return p.inUse()
	}
	return nil
}

// errUnsupported is the error of a volume kind no plugin handles yet.
var errUnsupported = errors.New("volume type is not supported by this node agent")

// MountError is the failure of one volume of a pod.
type MountError struct {
	// Volume is the volume's name in pod.spec.volumes.
	Volume string
	Err    error
}

// Error reads like the kubelet's FailedMount message: the failed step's
// own words when the plugin gave them (a step other than the driver's
// NodePublishVolume), MountVolume.SetUp's otherwise.
func (e *MountError) Error() string {
	if se, ok := e.Err.(*stepError); ok {
		return se.Error()
	}
	return fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", e.Volume, e.Err)
}

// Unwrap returns the cause.
func (e *MountError) Unwrap() error { return e.Err }

// stepError is the failure of one step of a volume's setup, worded as the
// kubelet words the failures of its volume operations: `<step> for volume
// "<name>" : <cause>`, or `<step> for volume "<name>" ` (with its
// trailing space) when the step says it all.
type stepError struct {
	step string
	// volume is the kubelet's name of the volume: the PV's for a claim,
	// the pod's volume's for an inline volume.
	volume string
	err    error // nil when the step says it all
	// kind, when set, is a sentinel the error matches (errors.Is)
	// without showing it.
	kind error
}

func (e *stepError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("%s for volume %q ", e.step, e.volume)
	}
	return fmt.Sprintf("%s for volume %q : %v", e.step, e.volume, e.err)
}

func (e *stepError) Unwrap() error { return e.err }

func (e *stepError) Is(target error) bool { return e.kind != nil && target == e.kind }
