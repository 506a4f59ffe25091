// Command csi-registrar registers a CSI driver with the node agent (package
// test/csi/registrar): the project's stand-in for node-driver-registrar. It runs beside the
// driver in its pod until SIGTERM or SIGINT, and exits non-zero when the agent reports
// that registration failed, so that the container restarts.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/test/csi/registrar"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	var cfg registrar.Config
	var healthPort int
	fs := pflag.NewFlagSet("csi-registrar", pflag.ContinueOnError)
	fs.StringVar(&cfg.CSIAddress, "csi-address", "/csi/csi.sock", "the driver's socket in this container")
	fs.StringVar(&cfg.KubeletRegistrationPath, "kubelet-registration-path", "", "the driver's socket on the host, as the node agent sees it (required)")
	fs.StringVar(&cfg.RegistrationDir, "plugin-registration-path", "/registration", "the node agent's plugin registration directory in this container")
	fs.IntVar(&healthPort, "health-port", 0, "serve GET /healthz on this port (0: none)")
	fs.StringVar(&cfg.HealthAddr, "http-endpoint", "", "serve GET /healthz on this address, host:port (as upstream's registrar); overrides --health-port")
	fs.DurationVar(&cfg.ConnectTimeout, "timeout", 10*time.Second, "the timeout of each call to the driver")
	gfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(gfs)
	fs.AddGoFlagSet(gfs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(os.Stderr, "csi-registrar: %v\n", err)
		return 2
	}
	defer klog.Flush()
	if cfg.HealthAddr == "" && healthPort > 0 {
		cfg.HealthAddr = fmt.Sprintf(":%d", healthPort)
	}
	r, err := registrar.New(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "csi-registrar: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger := klog.Background()
	if err := r.Run(klog.NewContext(ctx, logger)); err != nil {
		logger.Error(err, "csi-registrar stopped with an error")
		return 1
	}
	logger.Info("csi-registrar stopped")
	return 0
}
