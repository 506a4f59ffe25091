package resizer

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ControllerExpander is the call of the driver's controller service the resizer makes;
// csi.ControllerClient has it.
type ControllerExpander interface {
	ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest, opts ...grpc.CallOption) (*csi.ControllerExpandVolumeResponse, error)
}

var _ ControllerExpander = csi.ControllerClient(nil)

// growVolume grows pv's volume to size. It returns the size the volume has now and
// whether the node is to grow the file system too. A node-only driver is not called: the
// node grows the volume to size.
func (c *Controller) growVolume(ctx context.Context, pv *v1.PersistentVolume, size resource.Quantity) (resource.Quantity, bool, error) {
	if !c.cfg.Driver.ControllerExpansion {
		return size, true, nil
	}
	src := pv.Spec.CSI
	if src.VolumeHandle == "" {
		return resource.Quantity{}, false, errors.New("empty volume handle")
	}
	var secrets map[string]string
	if ref := src.ControllerExpandSecretRef; ref != nil {
		s, err := c.cfg.Client.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return resource.Quantity{}, false, fmt.Errorf("get controller expand secret %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		secrets = map[string]string{}
		for k, v := range s.Data {
			secrets[k] = string(v)
		}
	}
	capability, err := volumeCapability(pv, c.cfg.Driver.SingleNodeMultiWriter)
	if err != nil {
		return resource.Quantity{}, false, fmt.Errorf("volume capability of %s: %w", pv.Name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	resp, err := c.cfg.Expander.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{
		VolumeId:         src.VolumeHandle,
		CapacityRange:    &csi.CapacityRange{RequiredBytes: size.Value()},
		Secrets:          secrets,
		VolumeCapability: capability,
	})
	if err != nil {
		return resource.Quantity{}, false, err
	}
	return *resource.NewQuantity(resp.GetCapacityBytes(), resource.BinarySI), resp.GetNodeExpansionRequired(), nil
}

// volumeCapability is how pv is used, as ControllerExpandVolume is told: block or mount
// (with the PV's fsType and mount options), and the CSI access mode of its access modes.
func volumeCapability(pv *v1.PersistentVolume, singleNodeMultiWriter bool) (*csi.VolumeCapability, error) {
	mode, err := accessMode(pv.Spec.AccessModes, singleNodeMultiWriter)
	if err != nil {
		return nil, err
	}
	c := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
	if pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == v1.PersistentVolumeBlock {
		c.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		c.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{
			FsType:     pv.Spec.CSI.FSType,
			MountFlags: pv.Spec.MountOptions,
		}}
	}
	return c, nil
}

// accessMode maps a PV's access modes to the one CSI access mode that covers them.
// ReadWriteMany wins over the others; ReadWriteOncePod stands alone; ReadOnlyMany and
// ReadWriteOnce together have no CSI counterpart. A driver with SINGLE_NODE_MULTI_WRITER
// gets the finer single-node modes.
func accessMode(modes []v1.PersistentVolumeAccessMode, singleNodeMultiWriter bool) (csi.VolumeCapability_AccessMode_Mode, error) {
	has := func(m v1.PersistentVolumeAccessMode) bool { return slices.Contains(modes, m) }
	switch {
	case has(v1.ReadWriteOncePod):
		if slices.ContainsFunc(modes, func(m v1.PersistentVolumeAccessMode) bool { return m != v1.ReadWriteOncePod }) {
			return csi.VolumeCapability_AccessMode_UNKNOWN, errors.New("ReadWriteOncePod cannot be combined with other access modes")
		}
		if singleNodeMultiWriter {
			return csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, nil
		}
		return csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, nil
	case has(v1.ReadWriteMany):
		return csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, nil
	case has(v1.ReadOnlyMany) && has(v1.ReadWriteOnce):
		return csi.VolumeCapability_AccessMode_UNKNOWN, errors.New("ReadOnlyMany with ReadWriteOnce has no CSI access mode")
	case has(v1.ReadOnlyMany):
		return csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, nil
	case has(v1.ReadWriteOnce):
		if singleNodeMultiWriter {
			return csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER, nil
		}
		return csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, nil
	}
	return csi.VolumeCapability_AccessMode_UNKNOWN, fmt.Errorf("access modes %v have no CSI access mode", modes)
}
