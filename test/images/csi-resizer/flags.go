package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// options is the command line: external-resizer v2.2.0's flags, all accepted. Those of
// features the stand-in has not (metrics, the modify controller, other log formats) are
// accepted and said to be ignored (options.ignored), so manifests written for upstream run.
type options struct {
	showVersion bool
	kubeconfig  string
	master      string
	csiAddress  string
	timeout     time.Duration

	leaderElection          bool
	leaderElectionNamespace string
	leaseDuration           time.Duration
	renewDeadline           time.Duration
	retryPeriod             time.Duration
	leaderElectionLabels    map[string]string

	kubeAPIQPS   float64
	kubeAPIBurst int
	httpEndpoint string

	resyncPeriod       time.Duration
	workers            int
	retryIntervalStart time.Duration
	retryIntervalMax   time.Duration
	handleVolumeInUse  bool
	gates              featureGates

	// ignored are the flags given that change nothing here, each with why.
	ignored []string
}

// featureGates are external-resizer's feature gates at v2.2.0.
type featureGates struct {
	// AnnotateFsResize (alpha, off): the pre-resize capacity annotation on PVs.
	AnnotateFsResize bool
	// RecoverVolumeExpansionFailure (GA, on): the only behaviour of the stand-in.
	RecoverVolumeExpansionFailure bool
	// VolumeAttributesClass (GA, on): the modify controller, which the stand-in has not.
	VolumeAttributesClass bool
	// ReleaseLeaderElectionOnExit (alpha, off): give the lease up on SIGTERM.
	ReleaseLeaderElectionOnExit bool
	// set are the gates the command line named.
	set map[string]bool
	// unknown are the gates named that the stand-in does not know. Upstream knows its own
	// and the apiserver library's (which change nothing in a resizer); these are ignored.
	unknown []string
}

// Set parses key=value pairs separated by commas, as --feature-gates takes them; it may
// be given more than once.
func (g *featureGates) Set(s string) error {
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("missing bool value for %s", k)
		}
		on, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("invalid value of %s=%s: %w", k, v, err)
		}
		k = strings.TrimSpace(k)
		switch k {
		case "AnnotateFsResize":
			g.AnnotateFsResize = on
		case "RecoverVolumeExpansionFailure":
			g.RecoverVolumeExpansionFailure = on
		case "VolumeAttributesClass":
			g.VolumeAttributesClass = on
		case "ReleaseLeaderElectionOnExit":
			g.ReleaseLeaderElectionOnExit = on
		default:
			g.unknown = append(g.unknown, k)
		}
		if g.set == nil {
			g.set = map[string]bool{}
		}
		g.set[k] = on
	}
	return nil
}

func (g *featureGates) String() string {
	if g == nil {
		return ""
	}
	var parts []string
	for k, v := range g.set {
		parts = append(parts, fmt.Sprintf("%s=%t", k, v))
	}
	return strings.Join(parts, ",")
}

// labelsFlag parses --leader-election-labels: key:value pairs separated by commas.
type labelsFlag map[string]string

func (l labelsFlag) Set(s string) error {
	for _, item := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(item, ":")
		if !ok || strings.Contains(v, ":") {
			return fmt.Errorf("malformed item in list of labels: %s", item)
		}
		l[k] = v
	}
	return nil
}

func (l labelsFlag) String() string {
	var parts []string
	for k, v := range l {
		parts = append(parts, k+":"+v)
	}
	return strings.Join(parts, ",")
}

// parseFlags reads the command line. Flags take one dash or two, as Go's flag package
// (and upstream's) reads them; klog's flags (-v, -vmodule, ...) are in it too.
func parseFlags(args []string, output io.Writer) (options, error) {
	o := options{
		gates:                featureGates{RecoverVolumeExpansionFailure: true, VolumeAttributesClass: true},
		leaderElectionLabels: map[string]string{},
	}
	fs := flag.NewFlagSet("csi-resizer", flag.ContinueOnError)
	fs.SetOutput(output)
	klog.InitFlags(fs)

	fs.BoolVar(&o.showVersion, "version", false, "Show version.")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Absolute path to the kubeconfig file. Required only when running out of cluster.")
	fs.StringVar(&o.master, "master", "", "Master URL to build a client config from. Either this or kubeconfig needs to be set if the resizer is being run out of cluster.")
	fs.StringVar(&o.csiAddress, "csi-address", "/run/csi/socket", "Address of the CSI driver socket.")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "Timeout of each call to the CSI driver.")

	fs.BoolVar(&o.leaderElection, "leader-election", false, "Enable leader election.")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "Namespace where the leader election resource lives. Defaults to the pod namespace if not set.")
	fs.DurationVar(&o.leaseDuration, "leader-election-lease-duration", 15*time.Second, "Duration that non-leader candidates will wait to force acquire leadership.")
	fs.DurationVar(&o.renewDeadline, "leader-election-renew-deadline", 10*time.Second, "Duration that the acting leader will retry refreshing leadership before giving up.")
	fs.DurationVar(&o.retryPeriod, "leader-election-retry-period", 5*time.Second, "Duration the LeaderElector clients should wait between tries of actions.")
	fs.Var(labelsFlag(o.leaderElectionLabels), "leader-election-labels", "Labels to add to the lease when this replica becomes leader, as key:value pairs separated by commas.")

	fs.Float64Var(&o.kubeAPIQPS, "kube-api-qps", 5, "QPS to use while communicating with the kubernetes apiserver.")
	fs.IntVar(&o.kubeAPIBurst, "kube-api-burst", 10, "Burst to use while communicating with the kubernetes apiserver.")
	fs.StringVar(&o.httpEndpoint, "http-endpoint", "", "The TCP address of the diagnostics server (/healthz, /healthz/leader-election; no metrics here). Empty: none.")
	metricsAddress := fs.String("metrics-address", "", "(deprecated) Accepted; metrics are not served by this stand-in.")
	metricsPath := fs.String("metrics-path", "/metrics", "Accepted; metrics are not served by this stand-in.")

	fs.DurationVar(&o.resyncPeriod, "resync-period", 10*time.Minute, "Resync period for cache.")
	fs.IntVar(&o.workers, "workers", 10, "Concurrency to process multiple resize requests.")
	extraModify := fs.Bool("extra-modify-metadata", false, "Accepted; the modify controller is not part of this stand-in.")
	fs.DurationVar(&o.retryIntervalStart, "retry-interval-start", time.Second, "Initial retry interval of failed volume resize. It doubles with each failure, up to retry-interval-max.")
	fs.DurationVar(&o.retryIntervalMax, "retry-interval-max", 5*time.Minute, "Maximum retry interval of failed volume resize; an infeasible size is tried again after it.")
	fs.BoolVar(&o.handleVolumeInUse, "handle-volume-inuse-error", true, "Watch pods, so that a volume the driver cannot grow while in use is tried again only when no pod uses it.")
	fs.Var(&o.gates, "feature-gates", "Feature gates, key=value pairs separated by commas: AnnotateFsResize, RecoverVolumeExpansionFailure, VolumeAttributesClass, ReleaseLeaderElectionOnExit.")
	automaxprocs := fs.Bool("automaxprocs", false, "Accepted and ignored.")

	loggingFormat := fs.String("logging-format", "text", "Log format; only text is written by this stand-in.")
	fs.Duration("log-flush-frequency", 5*time.Second, "Maximum number of seconds between log flushes.")
	fs.Bool("log-json-split-stream", false, "Accepted and ignored (no JSON logs).")
	fs.String("log-json-info-buffer-size", "0", "Accepted and ignored (no JSON logs).")
	fs.Bool("log-text-split-stream", false, "Accepted and ignored.")
	fs.String("log-text-info-buffer-size", "0", "Accepted and ignored.")

	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if *metricsAddress != "" && o.httpEndpoint != "" {
		return options{}, errors.New("only one of --metrics-address and --http-endpoint can be set")
	}
	if !o.gates.RecoverVolumeExpansionFailure {
		return options{}, errors.New("--feature-gates=RecoverVolumeExpansionFailure=false: this stand-in implements only the recovery behaviour (the gate is GA and on in external-resizer v2.2.0)")
	}
	if *metricsAddress != "" {
		o.ignored = append(o.ignored, "--metrics-address: metrics are not served")
	}
	if *metricsPath != "/metrics" {
		o.ignored = append(o.ignored, "--metrics-path: metrics are not served")
	}
	if *extraModify {
		o.ignored = append(o.ignored, "--extra-modify-metadata: volumes are not modified (no VolumeAttributesClass support)")
	}
	if o.gates.set["VolumeAttributesClass"] {
		o.ignored = append(o.ignored, "--feature-gates=VolumeAttributesClass: volumes are not modified (no VolumeAttributesClass support)")
	}
	for _, k := range o.gates.unknown {
		o.ignored = append(o.ignored, "--feature-gates="+k+": not a gate of this stand-in")
	}
	if *automaxprocs {
		o.ignored = append(o.ignored, "--automaxprocs")
	}
	if *loggingFormat != "text" {
		o.ignored = append(o.ignored, "--logging-format="+*loggingFormat+": logs are text")
	}
	if o.httpEndpoint == "" {
		o.httpEndpoint = *metricsAddress
	}
	return o, nil
}
