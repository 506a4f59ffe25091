package resizer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
)

// Driver is what the resizer learns of the CSI driver as it starts.
type Driver struct {
	// Name is the driver's name (GetPluginInfo), which its PVs give as spec.csi.driver.
	Name string
	// ControllerExpansion: the controller service has EXPAND_VOLUME, so volumes grow by
	// ControllerExpandVolume. Without it the driver grows volumes on the node alone, and
	// the resizer only records the new size for the node (external-resizer's "trivial
	// resizer").
	ControllerExpansion bool
	// SingleNodeMultiWriter: the controller service has SINGLE_NODE_MULTI_WRITER, which
	// changes the CSI access modes ReadWriteOnce and ReadWriteOncePod map to.
	SingleNodeMultiWriter bool
}

// ErrExpansionUnsupported is Discover's error for a driver that grows volumes neither in
// its controller nor on the node.
var ErrExpansionUnsupported = errors.New("the CSI driver supports neither controller nor node expansion")

// Discover waits until the driver behind conn is ready (Probe), then learns its name and
// how it grows volumes. Each call is bounded by timeout; waiting for readiness goes on
// until ctx ends, since the driver's container may start after this one.
func Discover(ctx context.Context, conn grpc.ClientConnInterface, timeout time.Duration) (Driver, error) {
	identity := csi.NewIdentityClient(conn)
	if err := waitReady(ctx, identity, timeout); err != nil {
		return Driver{}, err
	}
	call := func(f func(ctx context.Context) error) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return f(ctx)
	}
	var d Driver
	err := call(func(ctx context.Context) error {
		info, err := identity.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
		if err == nil && info.GetName() == "" {
			err = errors.New("empty name")
		}
		d.Name = info.GetName()
		return err
	})
	if err != nil {
		return Driver{}, fmt.Errorf("get the driver's name: %w", err)
	}

	var controllerService bool
	err = call(func(ctx context.Context) error {
		resp, err := identity.GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
		for _, c := range resp.GetCapabilities() {
			if c.GetService().GetType() == csi.PluginCapability_Service_CONTROLLER_SERVICE {
				controllerService = true
			}
		}
		return err
	})
	if err != nil {
		return Driver{}, fmt.Errorf("get plugin capabilities of %s: %w", d.Name, err)
	}
	if !controllerService {
		return Driver{}, fmt.Errorf("CSI driver %s has no controller service", d.Name)
	}

	err = call(func(ctx context.Context) error {
		resp, err := csi.NewControllerClient(conn).ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
		for _, c := range resp.GetCapabilities() {
			switch c.GetRpc().GetType() {
			case csi.ControllerServiceCapability_RPC_EXPAND_VOLUME:
				d.ControllerExpansion = true
			case csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER:
				d.SingleNodeMultiWriter = true
			}
		}
		return err
	})
	if err != nil {
		return Driver{}, fmt.Errorf("get controller capabilities of %s: %w", d.Name, err)
	}
	if d.ControllerExpansion {
		return d, nil
	}

	var nodeExpansion bool
	err = call(func(ctx context.Context) error {
		resp, err := csi.NewNodeClient(conn).NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
		for _, c := range resp.GetCapabilities() {
			if c.GetRpc().GetType() == csi.NodeServiceCapability_RPC_EXPAND_VOLUME {
				nodeExpansion = true
			}
		}
		return err
	})
	if err != nil {
		return Driver{}, fmt.Errorf("get node capabilities of %s: %w", d.Name, err)
	}
	if !nodeExpansion {
		return Driver{}, fmt.Errorf("CSI driver %s: %w", d.Name, ErrExpansionUnsupported)
	}
	return d, nil
}

// waitReady calls Probe until the driver answers ready (or leaves readiness unsaid) or
// ctx ends.
func waitReady(ctx context.Context, identity csi.IdentityClient, timeout time.Duration) error {
	logger := klog.FromContext(ctx)
	for {
		callCtx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := identity.Probe(callCtx, &csi.ProbeRequest{}, grpc.WaitForReady(true))
		cancel()
		if err == nil && (resp.GetReady() == nil || resp.GetReady().GetValue()) {
			return nil
		}
		if err == nil {
			err = errors.New("not ready")
		}
		if ctx.Err() != nil {
			return fmt.Errorf("probe the CSI driver: %w", err)
		}
		logger.Info("CSI driver not ready yet; probing again", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
