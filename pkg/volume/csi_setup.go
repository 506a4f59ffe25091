package volume

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/volume/csi"
)

// setUp publishes a pod's CSI volume in the kubelet's order: the volume
// recorded in use, its attachment awaited, NodeStageVolume (once per
// node), NodePublishVolume, then the node's part of an expansion the
// claim waits for (offline expansion). Only the steps that change what is
// on the node hold the volume's lock; the wait for the attachment and the
// expansion's own call do not hold it.
func (p *csiPlugin) setUp(ctx context.Context, req *setUpRequest) (Mount, error) {
	// A volume this run published and that is still mounted needs nothing,
	// not even a read of its claim, unless its driver wants republishing.
	if v, ok := p.lookup(req.pod.UID, req.vol.Name); ok && !v.republish {
		mps, err := p.mounter.mountPoints(v.target)
		if err != nil {
			return Mount{}, err
		}
		if _, ok := findMount(mps, v.target); ok {
			return v.mount, nil
		}
	}
	op, err := p.prepare(ctx, req)
	if err != nil {
		return Mount{}, err
	}
	published, err := p.recordInUse(op)
	if err != nil {
		return Mount{}, err
	}
	if !published {
		var publishContext map[string]string
		if op.attachID != "" {
			if publishContext, err = p.waitAttached(ctx, op.attachID, op.cv); err != nil {
				return Mount{}, err
			}
		}
		if err := p.publish(ctx, op, publishContext); err != nil {
			return Mount{}, err
		}
	}
	// Until it succeeds the volume is not remembered: the next pass finds
	// it published and expands it again, and the pod does not start.
	if err := p.expand.atMount(ctx, op.record, op.cv.pvc, op.cv.pv); err != nil {
		return Mount{}, err
	}
	p.remember(req.pod.UID, req.vol.Name, op.record)
	p.expand.observe(op.cv.pvc, op.cv.pv)
	return op.record.mount, nil
}

// csiPublish is one pod volume on its way to being published: what the
// steps of setUp share.
type csiPublish struct {
	req    *setUpRequest
	cv     *csiVolume
	pol    driverPolicy
	driver *csi.Driver
	mode   storagev1.VolumeLifecycleMode
	// dir is the pod's volume directory, named after the PV for claims.
	dir string
	// attachID names the VolumeAttachment to wait for; empty when the
	// volume needs no attaching.
	attachID string
	// record is the volume as it is published: target, staging path,
	// capability.
	record publishedVolume
}

// prepare resolves the pod volume to its driver and decides the paths and
// the capability it is published with.
func (p *csiPlugin) prepare(ctx context.Context, req *setUpRequest) (*csiPublish, error) {
	cv, err := p.resolve(ctx, req.pod, req.vol)
	if err != nil {
		return nil, err
	}
	pol, err := p.policy(ctx, cv.driver)
	if err != nil {
		return nil, err
	}
	mode := storagev1.VolumeLifecyclePersistent
	if cv.ephemeral {
		mode = storagev1.VolumeLifecycleEphemeral
	}
	if !slices.Contains(pol.modes, mode) {
		return nil, fmt.Errorf("volume mode %q not supported by driver %s (only supports %q)", mode, cv.driver, pol.modes)
	}
	driver, err := p.drivers.Driver(cv.driver)
	if err != nil {
		return nil, err
	}
	op := &csiPublish{req: req, cv: cv, pol: pol, driver: driver, mode: mode,
		dir: filepath.Join(filepath.Dir(req.dir), cv.dirName)}
	target := filepath.Join(op.dir, "mount")
	if cv.block {
		target = p.blockDir("publish", cv.dirName, string(req.pod.UID))
	}
	staging := ""
	if driver.StageUnstage && !cv.ephemeral {
		staging = filepath.Join(p.stagingDir(cv.driver, cv.handle), "globalmount")
		if cv.block {
			staging = p.blockDir("staging", cv.dirName)
		}
	}
	capability := &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: cv.fsType, MountFlags: cv.mountOptions}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: cv.accessMode},
	}
	if cv.block {
		capability.AccessType = &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}
	} else if driver.VolumeMountGroup && req.fsGroup != nil {
		capability.GetMount().VolumeMountGroup = strconv.FormatInt(*req.fsGroup, 10)
	}
	mnt := Mount{HostPath: target, ReadOnly: cv.readOnly, Managed: true, Plugin: csiPluginName, Block: cv.block}
	op.record = publishedVolume{driver: cv.driver, handle: cv.handle, target: target, staging: staging, dirName: cv.dirName,
		mount: mnt, republish: pol.requiresRepublish,
		pod:      podRef{namespace: req.pod.Namespace, name: req.pod.Name, uid: req.pod.UID},
		readOnly: cv.readOnly, block: cv.block, capability: capability, expandSecret: cv.expandSecret}
	if cv.pvc != nil {
		op.record.claim = types.NamespacedName{Namespace: cv.pvc.Namespace, Name: cv.pvc.Name}
	}
	if pol.attachRequired && !cv.ephemeral {
		op.attachID = attachmentName(cv.handle, cv.driver, p.nodeName)
	}
	return op, nil
}

// recordInUse writes the volume's records, unless an earlier pass
// published it already (published: nothing is left to do but what comes
// after the publish). The volume is recorded before anything is asked of
// anyone: from now on the Node reports it in use (volumesInUse, read from
// these records) so it is never detached under a mount, a teardown of
// another pod of the volume leaves it staged, and a pass cut short leaves
// enough for the teardown to undo what the driver may have done.
func (p *csiPlugin) recordInUse(op *csiPublish) (published bool, err error) {
	defer p.inUseChanged()
	cv, target, staging := op.cv, op.record.target, op.record.staging
	unlock := p.lockVolume(cv.driver, cv.handle)
	defer unlock()
	mps, err := p.mounter.mountPoints(target)
	if err != nil {
		return false, err
	}
	if _, ok := findMount(mps, target); ok && !op.pol.requiresRepublish {
		return true, nil
	}
	// The driver creates the target itself; the kubelet makes its parent.
	if err := os.MkdirAll(op.dir, 0o750); err != nil {
		return false, fmt.Errorf("create volume directory: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return false, fmt.Errorf("create volume directory: %w", err)
	}
	data := volData{SpecVolID: cv.dirName, VolumeHandle: cv.handle, DriverName: cv.driver, NodeName: p.nodeName,
		AttachmentID: op.attachID, VolumeLifecycleMode: string(op.mode), Block: cv.block}
	if err := writeVolData(op.dir, data); err != nil {
		return false, err
	}
	if staging != "" {
		gdir := p.stagingDir(cv.driver, cv.handle)
		if cv.block {
			gdir = p.blockDir(cv.dirName, "data")
		}
		if err := os.MkdirAll(gdir, 0o750); err != nil {
			return false, fmt.Errorf("create volume directory: %w", err)
		}
		if err := os.MkdirAll(staging, 0o750); err != nil {
			return false, fmt.Errorf("create staging directory: %w", err)
		}
		if err := writeVolData(gdir, volData{VolumeHandle: cv.handle, DriverName: cv.driver, AttachmentID: op.attachID}); err != nil {
			return false, err
		}
	}
	return false, nil
}

// publish stages the volume (once per node) and publishes it into the
// pod's directory, under the volume's lock.
func (p *csiPlugin) publish(ctx context.Context, op *csiPublish, publishContext map[string]string) error {
	req, cv, pol, driver := op.req, op.cv, op.pol, op.driver
	target, staging, capability := op.record.target, op.record.staging, op.record.capability
	unlock := p.lockVolume(cv.driver, cv.handle)
	defer unlock()
	if staging != "" {
		if err := p.stage(ctx, driver, cv, staging, publishContext, capability); err != nil {
			return err
		}
	}

	volCtx := map[string]string{}
	for k, v := range cv.attributes {
		volCtx[k] = v
	}
	if pol.podInfoOnMount {
		volCtx[ctxPodName] = req.pod.Name
		volCtx[ctxPodNamespace] = req.pod.Namespace
		volCtx[ctxPodUID] = string(req.pod.UID)
		volCtx[ctxServiceAccount] = req.pod.Spec.ServiceAccountName
		volCtx[ctxEphemeral] = fmt.Sprint(cv.ephemeral)
	}
	secrets, err := p.secrets(ctx, cv.publishRef)
	if err != nil {
		return err
	}
	if len(pol.tokenRequests) > 0 {
		tokens, err := p.serviceAccountTokens(ctx, req.pod, pol.tokenRequests)
		if err != nil {
			return err
		}
		if pol.tokensInSecrets {
			if secrets == nil {
				secrets = map[string]string{}
			}
			secrets[ctxTokens] = tokens
		} else {
			volCtx[ctxTokens] = tokens
		}
	}
	cctx, cancel := nodeCallContext(ctx)
	_, err = driver.Node().NodePublishVolume(cctx, &csipb.NodePublishVolumeRequest{
		VolumeId: cv.handle, PublishContext: publishContext, StagingTargetPath: staging, TargetPath: target,
		VolumeCapability: capability, Readonly: cv.readOnly, Secrets: secrets, VolumeContext: volCtx,
	})
	cancel()
	if err != nil {
		return err
	}
	// A driver with VOLUME_MOUNT_GROUP got the fsGroup in the request and
	// owns its application.
	if !cv.block && !driver.VolumeMountGroup && fsGroupApplies(pol.fsGroupPolicy, cv) {
		if err := planFSGroup(req.fsGroup, req.fsGroupPolicy, cv.readOnly).apply(target); err != nil {
			return fmt.Errorf("apply fsGroup: %w", err)
		}
	}
	klog.FromContext(ctx).V(2).Info("CSI volume published", "volume", req.vol.Name, "driver", cv.driver,
		"handle", cv.handle, "staged", staging != "", "target", target)
	return nil
}

// stage calls NodeStageVolume unless this run already did for the volume.
func (p *csiPlugin) stage(ctx context.Context, driver *csi.Driver, cv *csiVolume, staging string,
	publishContext map[string]string, capability *csipb.VolumeCapability) error {
	p.mu.Lock()
	done := p.staged[staging]
	p.mu.Unlock()
	if done {
		return nil
	}
	secrets, err := p.secrets(ctx, cv.stageSecret)
	if err != nil {
		return err
	}
	cctx, cancel := nodeCallContext(ctx)
	defer cancel()
	if _, err := driver.Node().NodeStageVolume(cctx, &csipb.NodeStageVolumeRequest{
		VolumeId: cv.handle, PublishContext: publishContext, StagingTargetPath: staging,
		VolumeCapability: capability, Secrets: secrets, VolumeContext: cv.attributes,
	}); err != nil {
		// After a final error the driver surely did not stage the volume:
		// the staging directory goes, so that a teardown before the next
		// try has nothing to unstage. After any other error the volume may
		// be staged, and the teardown unstages it.
		if finalError(err) {
			_ = os.Remove(staging)
		}
		return fmt.Errorf("MountDevice (NodeStageVolume): %w", err)
	}
	p.mu.Lock()
	p.staged[staging] = true
	p.mu.Unlock()
	return nil
}

// finalError says a failed driver call surely ended without effect.
// Cancellation, a timeout, an unreachable or exhausted driver and Aborted
// (an operation still pending) leave it uncertain, and so does an error
// that carries no gRPC status: it came before the call reached the driver.
func finalError(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded, codes.Unavailable, codes.ResourceExhausted, codes.Aborted:
		return false
	}
	return true
}
