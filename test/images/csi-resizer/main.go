// Command csi-resizer grows the volumes of a CSI driver as their claims ask (package
// resizer): the project's stand-in for external-resizer v2.2.0, whose module the Go module
// proxy refuses, as the upstream CSI Mock specs deploy it beside the mock driver. It takes
// upstream's flags (flags.go), waits for the driver on --csi-address, learns how the driver
// grows volumes, and runs the resize controller until SIGTERM or SIGINT; with
// --leader-election, only while it holds the lease.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/test/csi/endpoint"
	"github.com/nodeagent/nodeagent/test/images/csi-resizer/resizer"
)

// version is what --version prints: the upstream release stood in for.
const version = "v2.2.0 (nodeagent stand-in)"

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	o, err := parseFlags(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "csi-resizer: %v\n", err)
		return 2
	}
	defer klog.Flush()
	if o.showVersion {
		fmt.Println(os.Args[0], version)
		return 0
	}
	logger := klog.Background()
	logger.Info("Version", "version", version)
	for _, why := range o.ignored {
		logger.Info("Flag accepted and ignored", "flag", why)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serve(klog.NewContext(ctx, logger), o); err != nil {
		logger.Error(err, "csi-resizer stopped with an error")
		return 1
	}
	logger.Info("csi-resizer stopped")
	return 0
}

// serve builds the clients, learns the driver and runs the controller until ctx ends.
func serve(ctx context.Context, o options) error {
	restCfg, err := restConfig(o)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	conn, err := dialCSI(o.csiAddress)
	if err != nil {
		return err
	}
	defer conn.Close()
	driver, err := resizer.Discover(ctx, conn, o.timeout)
	if err != nil {
		return err
	}
	klog.FromContext(ctx).Info("CSI driver found", "driver", driver.Name,
		"controllerExpansion", driver.ControllerExpansion, "singleNodeMultiWriter", driver.SingleNodeMultiWriter)
	ctrl, err := resizer.New(resizer.Config{
		Client:             client,
		Driver:             driver,
		Expander:           csi.NewControllerClient(conn),
		Timeout:            o.timeout,
		Workers:            o.workers,
		ResyncPeriod:       o.resyncPeriod,
		RetryIntervalStart: o.retryIntervalStart,
		RetryIntervalMax:   o.retryIntervalMax,
		AnnotateFsResize:   o.gates.AnnotateFsResize,
		HandleVolumeInUse:  o.handleVolumeInUse,
	})
	if err != nil {
		return err
	}
	var le *leader
	if o.leaderElection {
		// Its own client, so that a busy controller's throttled client does not cost the
		// lease.
		leClient, err := kubernetes.NewForConfig(restCfg)
		if err != nil {
			return fmt.Errorf("kubernetes client: %w", err)
		}
		le = newLeader(leClient, o, driver.Name)
	}
	if o.httpEndpoint != "" {
		stopHealth, err := serveHealth(o.httpEndpoint, le)
		if err != nil {
			return err
		}
		defer stopHealth()
	}
	if le == nil {
		return ctrl.Run(ctx)
	}
	return le.run(ctx, ctrl.Run)
}

// restConfig is the apiserver's address and credentials: from --master and --kubeconfig
// when given, the pod's service account otherwise.
func restConfig(o options) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if o.master != "" || o.kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags(o.master, o.kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("cluster config: %w", err)
	}
	cfg.QPS = float32(o.kubeAPIQPS)
	cfg.Burst = o.kubeAPIBurst
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.UserAgent = "csi-resizer (nodeagent stand-in)"
	return cfg, nil
}

// dialCSI makes the client connection to the driver's socket; it connects on first use,
// and again should the driver restart.
func dialCSI(address string) (*grpc.ClientConn, error) {
	path, err := endpoint.SocketPath(address)
	if err != nil {
		return nil, err
	}
	target := "unix:" + path
	if filepath.IsAbs(path) {
		target = "unix://" + path
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("CSI address %q: %w", address, err)
	}
	return conn, nil
}
