// Command csi-mountpod is the project's mount-pod CSI driver (package test/csi/mountpod):
// NodePublishVolume makes a pod on the node that serves the volume, waits for it, and
// bind-mounts what it serves. It talks to the apiserver with --kubeconfig and serves until
// SIGTERM or SIGINT.
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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/test/csi/mountpod"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	var cfg mountpod.Config
	var kubeconfig string
	fs := pflag.NewFlagSet("csi-mountpod", pflag.ContinueOnError)
	fs.StringVar(&cfg.Endpoint, "endpoint", "unix:///csi/csi.sock", "the unix socket to serve CSI on")
	fs.StringVar(&cfg.DriverName, "drivername", mountpod.DefaultDriverName, "the CSI driver name")
	fs.StringVar(&cfg.NodeID, "nodeid", "", "the node's name: the node ID and the mount pods' node (required)")
	fs.StringVar(&cfg.StateDir, "statedir", "", "the host directory of the volumes' mount points, seen at the same path here and shared both ways (required)")
	fs.StringVar(&cfg.Namespace, "mount-namespace", "", "the namespace of the mount pods (required)")
	fs.StringVar(&cfg.Image, "mount-image", "", "the mount pods' image, a busybox (required)")
	fs.DurationVar(&cfg.MountPodDelay, "mount-pod-delay", 0, "how long a mount pod waits before it mounts its file system and becomes Ready")
	fs.DurationVar(&cfg.ReadyTimeout, "ready-timeout", 0, "how long NodePublishVolume waits for the mount pod to be Ready (default 90s)")
	fs.DurationVar(&cfg.GoneTimeout, "gone-timeout", 0, "how long the last NodeUnpublishVolume waits for the mount pod to be gone (default 60s)")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "the kubeconfig to reach the apiserver with (required)")
	gfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(gfs)
	fs.AddGoFlagSet(gfs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(os.Stderr, "csi-mountpod: %v\n", err)
		return 2
	}
	defer klog.Flush()
	if kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "csi-mountpod: --kubeconfig is required")
		return 2
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "csi-mountpod: %v\n", err)
		return 1
	}
	rc.UserAgent = "csi-mountpod"
	if cfg.Client, err = kubernetes.NewForConfig(rc); err != nil {
		fmt.Fprintf(os.Stderr, "csi-mountpod: %v\n", err)
		return 1
	}
	d, err := mountpod.New(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "csi-mountpod: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger := klog.Background()
	if err := d.Run(klog.NewContext(ctx, logger)); err != nil {
		logger.Error(err, "csi-mountpod stopped with an error")
		return 1
	}
	logger.Info("csi-mountpod stopped")
	return 0
}
