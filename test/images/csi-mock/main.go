// Command csi-mock stands in for the kubernetes-csi hostpath plugin (the image
// hostpathplugin) in the upstream `[sig-storage] CSI Mock` specs, which run it in one of two
// ways and read its flags as the plugin's:
//
//   - csi-mock-driver.yaml: the driver itself, a mock (package mock) that keeps its
//     volumes in memory and writes every CSI call to its log as `gRPCCall: <json>`, for
//     e2e.test to read back. Flags: --drivername, --nodeid, --endpoint, --statedir
//     (accepted, unused), --enable-attach, --attach-limit, --enable-topology (default on,
//     as the plugin's), --node-expand-required/--enable-volume-expansion (default on),
//     --disable-controller-expansion, --disable-node-expansion, --max-volume-size.
//   - csi-mock-proxy.yaml, with -proxy-endpoint=tcp://:9000: a proxy (package proxy) that
//     serves the CSI socket at --endpoint with the connections e2e.test makes to that port,
//     e2e.test then serving the calls from its embedded mock.
//
// It serves until SIGTERM or SIGINT. Flags take one dash or two, as the plugin's (Go's flag
// package): the manifests write both.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/test/csi/endpoint"
	"github.com/nodeagent/nodeagent/test/images/csi-mock/mock"
	"github.com/nodeagent/nodeagent/test/images/csi-mock/proxy"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// options are the command line.
type options struct {
	endpoint, proxyEndpoint string
	driver                  mock.Config
	maxVolumesPerNode       int64
	volumeExpansion         bool
	disableController       bool
	disableNode             bool
	version                 bool
}

func parse(args []string) (*options, error) {
	var o options
	fs := flag.NewFlagSet("csi-mock", flag.ContinueOnError)
	fs.StringVar(&o.endpoint, "endpoint", "unix:///tmp/csi.sock", "the CSI socket to serve: a path or unix://path")
	fs.StringVar(&o.proxyEndpoint, "proxy-endpoint", "", "instead of serving CSI, pair connections to --endpoint with connections made to this one (tcp://[host]:port), as e2e.test's embedded mock driver needs")
	fs.StringVar(&o.driver.DriverName, "drivername", mock.DefaultDriverName, "the CSI driver name")
	fs.StringVar(&o.driver.NodeID, "nodeid", "", "the node ID (required without --proxy-endpoint)")
	fs.String("statedir", "/csi-data-dir", "accepted for the hostpath plugin's sake: the mock keeps its volumes in memory")
	fs.BoolVar(&o.driver.EnableAttach, "enable-attach", false, "advertise PUBLISH_UNPUBLISH_VOLUME")
	fs.Int64Var(&o.driver.AttachLimit, "attach-limit", 0, "the node's limit of attached volumes (max_volumes_per_node), 0 for none")
	fs.Int64Var(&o.maxVolumesPerNode, "maxvolumespernode", 0, "the node's volume limit when --attach-limit is not set")
	fs.BoolVar(&o.driver.EnableTopology, "enable-topology", true, "advertise VOLUME_ACCESSIBILITY_CONSTRAINTS, the node's segment being "+mock.TopologyKey+"=<nodeid>")
	fs.BoolVar(&o.volumeExpansion, "enable-volume-expansion", true, "advertise volume expansion")
	fs.BoolVar(&o.volumeExpansion, "node-expand-required", true, "the same as --enable-volume-expansion (the hostpath plugin's older name)")
	fs.BoolVar(&o.disableController, "disable-controller-expansion", false, "do not advertise controller expansion")
	fs.BoolVar(&o.disableNode, "disable-node-expansion", false, "do not advertise node expansion")
	fs.Int64Var(&o.driver.MaxVolumeSize, "max-volume-size", mock.DefaultMaxVolumeSize, "the largest volume CreateVolume makes, in bytes")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.driver.AttachLimit == 0 {
		o.driver.AttachLimit = o.maxVolumesPerNode
	}
	o.driver.ControllerExpansion = o.volumeExpansion && !o.disableController
	o.driver.NodeExpansion = o.volumeExpansion && !o.disableNode
	return &o, nil
}

func run(args []string) int {
	o, err := parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "csi-mock: %v\n", err)
		return 2
	}
	if o.version {
		fmt.Println("csi-mock", mock.VendorVersion)
		return 0
	}
	defer klog.Flush()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger := klog.Background()
	ctx = klog.NewContext(ctx, logger)
	if o.proxyEndpoint != "" {
		err = runProxy(ctx, proxy.Config{Endpoint: o.endpoint, PeerEndpoint: o.proxyEndpoint})
	} else {
		err = serve(ctx, o.endpoint, o.driver)
	}
	if err != nil {
		logger.Error(err, "csi-mock stopped with an error")
		return 1
	}
	logger.Info("csi-mock stopped")
	return 0
}

func runProxy(ctx context.Context, cfg proxy.Config) error {
	p, err := proxy.Listen(cfg)
	if err != nil {
		return err
	}
	return p.Run(ctx)
}

// serve runs the mock driver on the endpoint until ctx ends, every call written to stdout
// (the container's log) for e2e.test. klog has stderr: two streams, whose lines the
// runtime keeps whole, so that a long call line is never cut by a log line.
func serve(ctx context.Context, ep string, cfg mock.Config) error {
	logger := klog.FromContext(ctx)
	d, err := mock.New(cfg)
	if err != nil {
		return err
	}
	lis, path, err := endpoint.Listen(ep)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	srv := grpc.NewServer(grpc.UnaryInterceptor(mock.LogCalls(os.Stdout)))
	d.Register(srv)
	logger.Info("Serving the mock CSI driver", "driver", cfg.DriverName, "node", cfg.NodeID, "socket", path,
		"attach", cfg.EnableAttach, "attachLimit", cfg.AttachLimit, "topology", cfg.EnableTopology)
	return endpoint.Serve(ctx, srv, lis)
}
