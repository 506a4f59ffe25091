// Command csi-hostpath is the project's hostpath CSI driver (package test/csi/hostpath):
// directory and loop-device volumes on the node it runs on, for end-to-end tests and
// csi-sanity. It serves until SIGTERM or SIGINT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/test/csi/hostpath"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	var cfg hostpath.Config
	fs := pflag.NewFlagSet("csi-hostpath", pflag.ContinueOnError)
	fs.StringVar(&cfg.Endpoint, "endpoint", "unix:///csi/csi.sock", "the unix socket to serve CSI on")
	fs.StringVar(&cfg.DriverName, "drivername", hostpath.DefaultDriverName, "the CSI driver name")
	fs.StringVar(&cfg.NodeID, "nodeid", "", "the node ID (required; the node's name in Kubernetes)")
	fs.StringVar(&cfg.StateDir, "statedir", "/csi-data-dir", "where the volumes' data and the driver's state live")
	fs.BoolVar(&cfg.EnableAttach, "enable-attach", false, "advertise PUBLISH_UNPUBLISH_VOLUME (ControllerPublishVolume records the attachment only)")
	fs.Int64Var(&cfg.MaxVolumesPerNode, "max-volumes-per-node", 0, "the node's volume limit, 0 for none")
	fs.Int64Var(&cfg.MaxVolumeSize, "max-volume-size", 1<<40, "the largest volume CreateVolume accepts, in bytes")
	fs.StringVar(&cfg.TopologyKey, "topology-key", "", "when set, the driver is topology-aware with the segment <key>=<nodeid>")
	fs.IntVar(&cfg.FailNodePublish, "fail-node-publish", 0, "fail the first N NodePublishVolume calls with Unavailable")
	fs.DurationVar(&cfg.SlowNodeCalls, "slow-node-calls", 0, "wait this long in NodeStageVolume and NodePublishVolume before acting (a window to kill the CO in)")
	gfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(gfs)
	fs.AddGoFlagSet(gfs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(os.Stderr, "csi-hostpath: %v\n", err)
		return 2
	}
	defer klog.Flush()
	d, err := hostpath.New(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "csi-hostpath: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger := klog.Background()
	if err := d.Run(klog.NewContext(ctx, logger)); err != nil {
		logger.Error(err, "csi-hostpath stopped with an error")
		return 1
	}
	logger.Info("csi-hostpath stopped")
	return 0
}
