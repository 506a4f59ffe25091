package volume

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeagent/nodeagent/pkg/kube"
	"github.com/nodeagent/nodeagent/pkg/poddir"
	"github.com/nodeagent/nodeagent/pkg/volume/csi"
)

const csiPluginName = "kubernetes.io/csi"

// nodeCallContext is the context of a call that changes a volume's state
// on the node (stage, publish and their undoing): it is not cancelled with
// the pod's pass, because CSI allows one call in flight per volume and a
// driver goes on with a call its caller gave up on. A pod deleted during a
// NodePublishVolume is torn down once the call has returned (or timed out),
// never beside it.
func nodeCallContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), csi.CallTimeout)
}

// Keys the kubelet adds to a volume's context for drivers whose CSIDriver
// asks for pod information (podInfoOnMount).
const (
	ctxPodName        = "csi.storage.k8s.io/pod.name"
	ctxPodNamespace   = "csi.storage.k8s.io/pod.namespace"
	ctxPodUID         = "csi.storage.k8s.io/pod.uid"
	ctxServiceAccount = "csi.storage.k8s.io/serviceAccount.name"
	ctxEphemeral      = "csi.storage.k8s.io/ephemeral"
	// ctxTokens carries the service account tokens the CSIDriver asks
	// for (tokenRequests): audience → token and expiry, as JSON.
	ctxTokens = "csi.storage.k8s.io/serviceAccount.tokens"
)

// volDataFile is the kubelet's record of a CSI volume, beside the pod's
// mount directory and beside the global staging directory: what a
// restarted agent (or a driver written for the kubelet) reads back.
const volDataFile = "vol_data.json"

// volData is the content of vol_data.json, with the kubelet's keys.
type volData struct {
	SpecVolID           string `json:"specVolID,omitempty"`
	VolumeHandle        string `json:"volumeHandle"`
	DriverName          string `json:"driverName"`
	NodeName            string `json:"nodeName,omitempty"`
	AttachmentID        string `json:"attachmentID,omitempty"`
	VolumeLifecycleMode string `json:"volumeLifecycleMode,omitempty"`
	// Block marks a raw block volume (the agent's own key): it is
	// published under plugins/kubernetes.io/csi/volumeDevices, not here.
	Block bool `json:"block,omitempty"`
}

// csiPlugin sets up persistentVolumeClaim volumes bound to CSI
// PersistentVolumes, generic ephemeral volumes and inline CSI volumes:
// NodeStageVolume into the volume's global directory (once per node),
// then NodePublishVolume into the pod's volume directory.
type csiPlugin struct {
	// attachWait bounds a pass's wait for a volume's attachment.
	attachWait time.Duration
	client     kube.Interface
	tokens     *tokenSource
	drivers    *csi.Registry
	nodeName   string
	layout     poddir.Layout
	mounter    mounter

	// node reads this node's Node from a watch (Config.Node); nil when the
	// attach/detach controller does not manage the node's attachments.
	node func() (*v1.Node, error)
	// expand grows the volumes of claims whose size grew: published ones
	// (online) and, at their publish, the others (offline).
	expand *expander

	// inUseChanges moves each time a record of a volume in use may have
	// changed on disk (recordInUse, tearDown: once they are done); inUse
	// scans the disk again only then, or once its last scan is older than
	// inUseRescan. The node's status asks every 10 s, and the scan looks
	// into every pod's directory.
	inUseChanges atomic.Uint64
	inUseMu      sync.Mutex
	inUseLast    inUseScan

	mu      sync.Mutex
	volumes map[string]*sync.Mutex // per volume (driver^handle): stage, publish and unstage in turn
	// staged holds the staging directories staged by this run, so the
	// driver is asked once per volume; after a restart it is asked again,
	// which CSI requires drivers to take as a no-op.
	staged map[string]bool
	// published remembers, per pod and volume name, what this run has
	// published (or found published), for the volume's stats.
	published map[types.UID]map[string]publishedVolume
}

// publishedVolume is one pod volume as its driver knows it.
type publishedVolume struct {
	driver, handle, target, staging, dirName string
	mount                                    Mount
	// republish: the CSIDriver asks for NodePublishVolume at every sync
	// (requiresRepublish), e.g. to hand the driver fresh tokens.
	republish bool

	// What online expansion needs, for volumes of a claim (claim.Name is
	// empty for inline volumes, which never grow): the claim, the pod
	// that events go to, the capability it was published with, and the
	// PV's nodeExpandSecretRef.
	claim        types.NamespacedName
	pod          podRef
	readOnly     bool
	block        bool
	capability   *csipb.VolumeCapability
	expandSecret *v1.SecretReference
}

// podRef names a pod for events.
type podRef struct {
	namespace, name string
	uid             types.UID
}

func newCSIPlugin(client kube.Interface, tokens *tokenSource, drivers *csi.Registry, nodeName string, layout poddir.Layout, m mounter) *csiPlugin {
	return &csiPlugin{attachWait: csi.CallTimeout, client: client, tokens: tokens, drivers: drivers, nodeName: nodeName, layout: layout, mounter: m, volumes: map[string]*sync.Mutex{}, staged: map[string]bool{},
		published: map[types.UID]map[string]publishedVolume{}}
}

func (p *csiPlugin) name() string { return csiPluginName }

func (p *csiPlugin) canSupport(vol *v1.Volume) bool {
	return vol.CSI != nil || vol.PersistentVolumeClaim != nil || vol.Ephemeral != nil
}

// lockVolume serialises the node calls of one volume across pods.
func (p *csiPlugin) lockVolume(driver, handle string) func() {
	key := driver + "^" + handle
	p.mu.Lock()
	l, ok := p.volumes[key]
	if !ok {
		l = &sync.Mutex{}
		p.volumes[key] = l
	}
	p.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// csiVolume is a pod volume resolved to what the driver is called with.
type csiVolume struct {
	driver, handle string
	// dirName names the pod's volume directory: the PV's name for claims,
	// the volume's own for inline volumes, as the kubelet names them.
	dirName      string
	ephemeral    bool // inline CSI volume (lifecycle mode Ephemeral)
	readOnly     bool
	fsType       string
	mountOptions []string
	accessMode   csipb.VolumeCapability_AccessMode_Mode
	attributes   map[string]string
	stageSecret  *v1.SecretReference
	publishRef   *v1.SecretReference
	rwo          bool
	block        bool // volumeMode Block: a device for volumeDevices
	expandSecret *v1.SecretReference
	// The claim and its PV as read to resolve the volume; nil for inline
	// volumes.
	pvc *v1.PersistentVolumeClaim
	pv  *v1.PersistentVolume
}

// resolve follows a pod volume to its CSI source: the claim, its bound PV.
func (p *csiPlugin) resolve(ctx context.Context, pod *v1.Pod, vol *v1.Volume) (*csiVolume, error) {
	if vol.CSI != nil {
		cv := &csiVolume{
			driver:     vol.CSI.Driver,
			handle:     inlineHandle(pod, vol.Name),
			dirName:    vol.Name,
			ephemeral:  true,
			readOnly:   vol.CSI.ReadOnly != nil && *vol.CSI.ReadOnly,
			attributes: vol.CSI.VolumeAttributes,
			accessMode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
			rwo:        true,
		}
		if vol.CSI.FSType != nil {
			cv.fsType = *vol.CSI.FSType
		}
		if ref := vol.CSI.NodePublishSecretRef; ref != nil {
			cv.publishRef = &v1.SecretReference{Name: ref.Name, Namespace: pod.Namespace}
		}
		return cv, nil
	}
	if p.client == nil {
		return nil, errors.New("no API client to read the claim")
	}
	claimName, readOnly := "", false
	switch {
	case vol.PersistentVolumeClaim != nil:
		claimName, readOnly = vol.PersistentVolumeClaim.ClaimName, vol.PersistentVolumeClaim.ReadOnly
	case vol.Ephemeral != nil:
		claimName = pod.Name + "-" + vol.Name
	}
	pvc, err := whileForbidden(ctx, &p.tokens.lag, pod, func() (*v1.PersistentVolumeClaim, error) {
		return p.client.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, claimName, metav1.GetOptions{})
	})
	if err != nil {
		return nil, fmt.Errorf("error processing PVC %s/%s: failed to fetch PVC from API server: %w", pod.Namespace, claimName, err)
	}
	if vol.Ephemeral != nil {
		if ref := metav1.GetControllerOf(pvc); ref == nil || ref.UID != pod.UID {
			return nil, fmt.Errorf("error processing PVC %s/%s: PVC %s/%s was not created for pod %s/%s (pod is not owner)",
				pod.Namespace, claimName, pod.Namespace, claimName, pod.Namespace, pod.Name)
		}
	}
	if pvc.DeletionTimestamp != nil {
		return nil, fmt.Errorf("error processing PVC %s/%s: can't start pod because PVC is being deleted", pod.Namespace, claimName)
	}
	if pvc.Status.Phase != v1.ClaimBound || pvc.Spec.VolumeName == "" {
		return nil, fmt.Errorf("error processing PVC %s/%s: PVC %s/%s has non-bound phase (%q) or empty pvc.Spec.VolumeName (%q)",
			pod.Namespace, claimName, pod.Namespace, claimName, pvc.Status.Phase, pvc.Spec.VolumeName)
	}
	pv, err := whileForbidden(ctx, &p.tokens.lag, pod, func() (*v1.PersistentVolume, error) {
		return p.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	})
	if err != nil {
		return nil, fmt.Errorf("error processing PVC %s/%s: failed to fetch PV %s from API server: %w", pod.Namespace, claimName, pvc.Spec.VolumeName, err)
	}
	if ref := pv.Spec.ClaimRef; ref == nil || ref.UID != pvc.UID {
		return nil, fmt.Errorf("error processing PVC %s/%s: PV %s is not bound to this claim", pod.Namespace, claimName, pv.Name)
	}
	src := pv.Spec.CSI
	if src == nil {
		return nil, fmt.Errorf("PersistentVolume %s: %w", pv.Name, errUnsupported)
	}
	cv := &csiVolume{
		driver:       src.Driver,
		handle:       src.VolumeHandle,
		dirName:      pv.Name,
		readOnly:     readOnly || src.ReadOnly,
		fsType:       src.FSType,
		mountOptions: pv.Spec.MountOptions,
		attributes:   src.VolumeAttributes,
		accessMode:   accessMode(pv.Spec.AccessModes),
		stageSecret:  src.NodeStageSecretRef,
		publishRef:   src.NodePublishSecretRef,
		rwo:          slices.Contains(pv.Spec.AccessModes, v1.ReadWriteOnce) || slices.Contains(pv.Spec.AccessModes, v1.ReadWriteOncePod),
		block:        pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == v1.PersistentVolumeBlock,
		expandSecret: src.NodeExpandSecretRef,
		pvc:          pvc,
		pv:           pv,
	}
	return cv, nil
}

// inlineHandle is the handle of an inline volume, unique per pod and
// volume as the kubelet makes it.
func inlineHandle(pod *v1.Pod, volName string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(string(pod.UID)+volName)))
}

// accessMode maps a PV's access modes to the CSI mode the kubelet uses.
func accessMode(modes []v1.PersistentVolumeAccessMode) csipb.VolumeCapability_AccessMode_Mode {
	switch {
	case slices.Contains(modes, v1.ReadWriteOncePod):
		return csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	case slices.Contains(modes, v1.ReadWriteMany):
		return csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	case slices.Contains(modes, v1.ReadOnlyMany) && !slices.Contains(modes, v1.ReadWriteOnce):
		return csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	default:
		return csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	}
}

// driverPolicy is what the CSIDriver object says of a driver, with the
// API's defaults when there is none.
type driverPolicy struct {
	attachRequired    bool
	podInfoOnMount    bool
	requiresRepublish bool
	tokenRequests     []storagev1.TokenRequest
	// tokensInSecrets: the tokens go in NodePublishVolume's secrets, not in
	// its volume context (serviceAccountTokenInSecrets).
	tokensInSecrets bool
	fsGroupPolicy   storagev1.FSGroupPolicy
	modes           []storagev1.VolumeLifecycleMode
}

func (p *csiPlugin) policy(ctx context.Context, driver string) (driverPolicy, error) {
	pol := driverPolicy{attachRequired: true, fsGroupPolicy: storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy,
		modes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}}
	if p.client == nil {
		return pol, nil
	}
	d, err := p.client.StorageV1().CSIDrivers().Get(ctx, driver, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return pol, nil
	}
	if err != nil {
		return pol, fmt.Errorf("get CSIDriver %s: %w", driver, err)
	}
	if d.Spec.AttachRequired != nil {
		pol.attachRequired = *d.Spec.AttachRequired
	}
	if d.Spec.PodInfoOnMount != nil {
		pol.podInfoOnMount = *d.Spec.PodInfoOnMount
	}
	if d.Spec.FSGroupPolicy != nil {
		pol.fsGroupPolicy = *d.Spec.FSGroupPolicy
	}
	if len(d.Spec.VolumeLifecycleModes) > 0 {
		pol.modes = d.Spec.VolumeLifecycleModes
	}
	pol.requiresRepublish = d.Spec.RequiresRepublish != nil && *d.Spec.RequiresRepublish
	pol.tokenRequests = d.Spec.TokenRequests
	pol.tokensInSecrets = d.Spec.ServiceAccountTokenInSecrets != nil && *d.Spec.ServiceAccountTokenInSecrets
	return pol, nil
}

// The kubelet's places for raw block volumes, by PV name:
// volumeDevices/staging/<pv> (NodeStage), volumeDevices/publish/<pv>/<pod
// UID> (the device NodePublish makes) and volumeDevices/<pv>/data (the
// volume's record).
func (p *csiPlugin) blockDir(elem ...string) string {
	return filepath.Join(append([]string{p.layout.Root(), "plugins", csiPluginName, "volumeDevices"}, elem...)...)
}

// stagingDir is the volume's global directory on this node:
// plugins/kubernetes.io/csi/<driver>/<sha256(handle)>, whose globalmount
// the driver stages into.
func (p *csiPlugin) stagingDir(driver, handle string) string {
	return filepath.Join(p.layout.Root(), "plugins", csiPluginName, poddir.EscapePluginName(driver),
		fmt.Sprintf("%x", sha256.Sum256([]byte(handle))))
}

// serviceAccountTokens requests the tokens a CSIDriver asks for, bound to
// the pod, and encodes them for the volume context.
func (p *csiPlugin) serviceAccountTokens(ctx context.Context, pod *v1.Pod, reqs []storagev1.TokenRequest) (string, error) {
	type entry struct {
		Token               string    `json:"token"`
		ExpirationTimestamp time.Time `json:"expirationTimestamp"`
	}
	out := map[string]entry{}
	for _, r := range reqs {
		token, expires, err := p.tokens.tokenExpiring(ctx, pod, &v1.ServiceAccountTokenProjection{
			Audience: r.Audience, ExpirationSeconds: r.ExpirationSeconds})
		if err != nil {
			return "", err
		}
		out[r.Audience] = entry{Token: token, ExpirationTimestamp: expires}
	}
	b, err := json.Marshal(out)
	return string(b), err
}

func (p *csiPlugin) lookup(uid types.UID, volName string) (publishedVolume, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.published[uid][volName]
	return v, ok
}

func (p *csiPlugin) remember(uid types.UID, volName string, v publishedVolume) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.published[uid] == nil {
		p.published[uid] = map[string]publishedVolume{}
	}
	p.published[uid][volName] = v
}

// forget drops what was remembered of the pod's volume directory dirName.
func (p *csiPlugin) forget(uid types.UID, dirName string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, v := range p.published[uid] {
		if v.dirName == dirName {
			delete(p.published[uid], name)
		}
	}
	if len(p.published[uid]) == 0 {
		delete(p.published, uid)
	}
}

// volumeDir is a published volume for the stats: its target, measured by
// NodeGetVolumeStats when the driver offers it, walked otherwise.
func (p *csiPlugin) volumeDir(uid types.UID, volName string) (PodVolumeDir, bool) {
	v, ok := p.lookup(uid, volName)
	if !ok {
		return PodVolumeDir{}, false
	}
	d := PodVolumeDir{Name: volName, Plugin: csiPluginName, Path: v.target}
	if driver, err := p.drivers.Driver(v.driver); err == nil && driver.VolumeStats {
		d.Usage = func(ctx context.Context) (VolumeUsage, error) { return volumeStats(ctx, driver, v) }
	}
	return d, true
}

func volumeStats(ctx context.Context, driver *csi.Driver, v publishedVolume) (VolumeUsage, error) {
	var u VolumeUsage
	ctx, cancel := context.WithTimeout(ctx, csi.CallTimeout)
	defer cancel()
	resp, err := driver.Node().NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{
		VolumeId: v.handle, VolumePath: v.target, StagingTargetPath: v.staging})
	if err != nil {
		return u, fmt.Errorf("NodeGetVolumeStats %s: %w", v.handle, err)
	}
	for _, e := range resp.GetUsage() {
		switch e.GetUnit() {
		case csipb.VolumeUsage_BYTES:
			u.CapacityBytes, u.AvailableBytes, u.UsedBytes = e.GetTotal(), e.GetAvailable(), e.GetUsed()
		case csipb.VolumeUsage_INODES:
			u.Inodes, u.InodesFree, u.InodesUsed = e.GetTotal(), e.GetAvailable(), e.GetUsed()
		}
	}
	return u, nil
}

// fsGroupApplies says whether the pod's fsGroup owns the volume's files,
// by the driver's fsGroupPolicy.
func fsGroupApplies(policy storagev1.FSGroupPolicy, cv *csiVolume) bool {
	switch policy {
	case storagev1.FileFSGroupPolicy:
		return !cv.readOnly
	case storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy:
		return !cv.readOnly && cv.fsType != "" && cv.rwo
	default:
		return false
	}
}

// secrets reads a secret a driver needs for a call.
func (p *csiPlugin) secrets(ctx context.Context, ref *v1.SecretReference) (map[string]string, error) {
	if ref == nil || p.client == nil {
		return nil, nil
	}
	s, err := p.client.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("fetch secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	out := make(map[string]string, len(s.Data))
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out, nil
}

func writeVolData(dir string, d volData) error {
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, volDataFile)
	if old, err := os.ReadFile(path); err == nil && string(old) == string(b) {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o640); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}

func readVolData(dir string) (volData, error) {
	var d volData
	b, err := os.ReadFile(filepath.Join(dir, volDataFile))
	if err != nil {
		return d, err
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("parse %s: %w", filepath.Join(dir, volDataFile), err)
	}
	return d, nil
}

// tearDown unpublishes the pod's volume at dir and, when no other pod on
// the node still uses the volume, unstages it from its global directory.
func (p *csiPlugin) tearDown(ctx context.Context, dir string) error {
	defer p.inUseChanged()
	data, err := readVolData(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return removeDir(p.mounter, dir) // nothing was ever published here
	}
	if err != nil {
		return err
	}
	driver, err := p.drivers.Driver(data.DriverName)
	if err != nil {
		return fmt.Errorf("UnmountVolume.TearDown: %w", err)
	}
	unlock := p.lockVolume(data.DriverName, data.VolumeHandle)
	defer unlock()
	target := filepath.Join(dir, "mount")
	if data.Block {
		// dir is pods/<uid>/volumes/kubernetes.io~csi/<pv>.
		podUID := filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(dir))))
		target = p.blockDir("publish", data.SpecVolID, podUID)
	}
	cctx, cancel := nodeCallContext(ctx)
	_, err = driver.Node().NodeUnpublishVolume(cctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: data.VolumeHandle, TargetPath: target})
	cancel()
	// NotFound: the driver no longer knows the volume (an earlier pass
	// unpublished it and was cut short): nothing is left to undo.
	if err != nil && status.Code(err) != codes.NotFound {
		return fmt.Errorf("UnmountVolume.TearDown (NodeUnpublishVolume): %w", err)
	}
	p.forget(types.UID(filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(dir))))), filepath.Base(dir))
	if data.Block {
		if err := removeDir(p.mounter, target); err != nil {
			return err
		}
		_ = os.Remove(filepath.Dir(target)) // the PV's publish directory, once empty
	}
	if err := removeDir(p.mounter, dir); err != nil {
		return err
	}
	if data.VolumeLifecycleMode == string(storagev1.VolumeLifecycleEphemeral) || !driver.StageUnstage {
		return nil
	}
	inUse, err := p.publishedElsewhere(data.DriverName, data.VolumeHandle)
	if err != nil || inUse {
		return err
	}
	gdir := p.stagingDir(data.DriverName, data.VolumeHandle)
	staging := filepath.Join(gdir, "globalmount")
	if data.Block {
		gdir, staging = p.blockDir(data.SpecVolID), p.blockDir("staging", data.SpecVolID)
	}
	if _, err := os.Lstat(staging); errors.Is(err, fs.ErrNotExist) {
		return removeDir(p.mounter, gdir)
	}
	cctx, cancel = nodeCallContext(ctx)
	_, err = driver.Node().NodeUnstageVolume(cctx, &csipb.NodeUnstageVolumeRequest{VolumeId: data.VolumeHandle,
		StagingTargetPath: staging})
	cancel()
	// Whatever the answer, the volume is no longer known to be staged: the
	// next pod of the volume stages it again.
	p.mu.Lock()
	delete(p.staged, staging)
	p.mu.Unlock()
	if err != nil && status.Code(err) != codes.NotFound {
		return fmt.Errorf("UnmountDevice (NodeUnstageVolume): %w", err)
	}
	if data.Block {
		if err := removeDir(p.mounter, staging); err != nil {
			return err
		}
	}
	return removeDir(p.mounter, gdir)
}

// publishedElsewhere says whether any pod directory still records the
// volume: the disk, not memory, so it holds across restarts.
func (p *csiPlugin) publishedElsewhere(driver, handle string) (bool, error) {
	pattern := filepath.Join(p.layout.PodsDir(), "*", "volumes", poddir.EscapePluginName(csiPluginName), "*", volDataFile)
	files, err := filepath.Glob(pattern)
	if err != nil {
		return false, err
	}
	for _, f := range files {
		d, err := readVolData(filepath.Dir(f))
		if err == nil && d.DriverName == driver && d.VolumeHandle == handle {
			return true, nil
		}
	}
	return false, nil
}

// inUseScan is one scan of the disk by inUse.
type inUseScan struct {
	names   []v1.UniqueVolumeName
	changes uint64 // inUseChanges before the scan
	at      time.Time
	done    bool
}

// inUseRescan bounds the age of the scan inUse answers from, for records
// changed by anything else than this run's setups and teardowns.
const inUseRescan = time.Minute

// inUseChanged says that a record of a volume in use may have changed.
func (p *csiPlugin) inUseChanged() { p.inUseChanges.Add(1) }

// inUse lists the attachable volumes recorded on disk, staged or published:
// from before NodeStage until after NodeUnstage, so the attach/detach
// controller never detaches a volume still mounted here. It answers from
// its last scan while no record changed since.
func (p *csiPlugin) inUse() []v1.UniqueVolumeName {
	p.inUseMu.Lock()
	defer p.inUseMu.Unlock()
	changes := p.inUseChanges.Load()
	if last := p.inUseLast; !last.done || last.changes != changes || time.Since(last.at) >= inUseRescan {
		p.inUseLast = inUseScan{names: p.scanInUse(), changes: changes, at: time.Now(), done: true}
	}
	return slices.Clone(p.inUseLast.names)
}

// scanInUse reads the records of the volumes in use from the disk.
func (p *csiPlugin) scanInUse() []v1.UniqueVolumeName {
	patterns := []string{
		filepath.Join(p.layout.Root(), "plugins", csiPluginName, "*", "*", volDataFile),
		p.blockDir("*", "data", volDataFile),
		filepath.Join(p.layout.PodsDir(), "*", "volumes", poddir.EscapePluginName(csiPluginName), "*", volDataFile),
	}
	seen := map[v1.UniqueVolumeName]bool{}
	var out []v1.UniqueVolumeName
	for _, pattern := range patterns {
		files, _ := filepath.Glob(pattern)
		for _, f := range files {
			d, err := readVolData(filepath.Dir(f))
			if err != nil || d.AttachmentID == "" {
				continue
			}
			name := uniqueVolumeName(d.DriverName, d.VolumeHandle)
			if !seen[name] {
				seen[name] = true
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}
