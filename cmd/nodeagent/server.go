package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodeagent/nodeagent/pkg/certs"
	"github.com/nodeagent/nodeagent/pkg/cgroups"
	"github.com/nodeagent/nodeagent/pkg/kube"
	"github.com/nodeagent/nodeagent/pkg/metrics"
	"github.com/nodeagent/nodeagent/pkg/runtime"
	"github.com/nodeagent/nodeagent/pkg/server"
	"github.com/nodeagent/nodeagent/pkg/stats"
	"github.com/nodeagent/nodeagent/pkg/volume"
)

// nodeAPIExtras are what the node API shows besides pods and containers.
type nodeAPIExtras struct {
	stats   *stats.Provider
	metrics *metrics.Metrics
	// serving is the certificate from the kubelet-serving signer
	// (serverTLSBootstrap); nil means tlsCertFile or a self-signed one.
	serving *certs.Serving
	// timeline serves the pods' timelines at /debug/pods/.
	timeline http.Handler
}

// newNodeServer builds the node's HTTPS API (port 10250) from the configuration: the
// serving certificate, authentication and authorization as kubelet users configure them.
// The per-user stream and follow caps and the TokenReview rate limit, which the kubelet
// has no settings for, keep pkg/server's defaults.
// With enableServer false it returns nil and binds nothing, as the kubelet opens no port.
func newNodeServer(cfg *agentConfig, client kube.Interface, rt server.RuntimeService, pods server.PodLister, extras nodeAPIExtras) (*server.Server, error) {
	kc := cfg.kubelet
	if kc.EnableServer != nil && !*kc.EnableServer {
		return nil, nil
	}
	sc := server.Config{
		Address:                        kc.Address,
		Port:                           kc.Port,
		NodeName:                       cfg.nodeName,
		NodeIPs:                        cfg.nodeIPs,
		TLSCertFile:                    kc.TLSCertFile,
		TLSPrivateKeyFile:              kc.TLSPrivateKeyFile,
		CertDir:                        cfg.certDir,
		TLSMinVersion:                  kc.TLSMinVersion,
		TLSCipherSuites:                kc.TLSCipherSuites,
		ClientCAFile:                   kc.Authentication.X509.ClientCAFile,
		AnonymousEnabled:               *kc.Authentication.Anonymous.Enabled,
		WebhookAuthenticationEnabled:   *kc.Authentication.Webhook.Enabled,
		TokenCacheTTL:                  kc.Authentication.Webhook.CacheTTL.Duration,
		AuthorizationMode:              string(kc.Authorization.Mode),
		AuthorizedCacheTTL:             kc.Authorization.Webhook.CacheAuthorizedTTL.Duration,
		UnauthorizedCacheTTL:           kc.Authorization.Webhook.CacheUnauthorizedTTL.Duration,
		Client:                         client,
		Runtime:                        rt,
		Pods:                           pods,
		StreamingConnectionIdleTimeout: kc.StreamingConnectionIdleTimeout.Duration,
		RuntimeRequestTimeout:          kc.RuntimeRequestTimeout.Duration,
		Configz:                        configz(kc),
		EnableDebuggingHandlers:        *kc.EnableDebuggingHandlers,
		EnableProfilingHandler:         *kc.EnableProfilingHandler,
		EnableSystemLogHandler:         kc.EnableSystemLogHandler != nil && *kc.EnableSystemLogHandler,
		EnableSystemLogQuery:           kc.EnableSystemLogQuery != nil && *kc.EnableSystemLogQuery,
	}
	if extras.stats != nil {
		sc.Stats = extras.stats
		sc.CgroupStats = extras.stats
	}
	if extras.serving != nil {
		sc.ServingCertificate = extras.serving
	}
	sc.Timeline = extras.timeline
	if extras.metrics != nil {
		sc.Metrics = extras.metrics.Handler()
		sc.ProbeMetrics = extras.metrics.ProbesHandler()
		sc.MetricsRegistry = extras.metrics.Registry()
	}
	return server.New(sc)
}

// configz is the effective configuration as /configz shows it: the
// versioned KubeletConfiguration with its kind and apiVersion.
func configz(kc *kubeletv1beta1.KubeletConfiguration) *kubeletv1beta1.KubeletConfiguration {
	out := kc.DeepCopy()
	out.APIVersion = kubeletv1beta1.SchemeGroupVersion.String()
	out.Kind = "KubeletConfiguration"
	return out
}

// newStatsProvider builds the Summary API's source: the node's cgroups
// and filesystems, CRI stats, the pods' volumes and the system
// containers (the agent's cgroup, the runtime's, kubepods). The claims'
// volumes it measures are also the kubelet's volume gauges on /metrics.
func newStatsProvider(ctx context.Context, cfg *agentConfig, cri *runtime.Client, pods func() []*v1.Pod, podCgroups *cgroups.Manager, volumes *volume.Manager, started time.Time, agentMetrics *metrics.Metrics) (*stats.Provider, error) {
	kc := cfg.kubelet
	sc := stats.SystemCgroups{Agent: kc.KubeletCgroups, Runtime: cfg.runtimeCgroups}
	sp := stats.Config{
		NodeName:   cfg.nodeName,
		Runtime:    cri.RuntimeService(),
		Images:     cri.ImageService(),
		Pods:       pods,
		RootDir:    cfg.rootDir,
		PodLogsDir: kc.PodLogsDir,
		StartTime:  started,
		VolumeDirs: func(pod *v1.Pod) []stats.VolumeDir {
			var out []stats.VolumeDir
			for _, d := range volumes.VolumeDirs(pod) {
				sd := stats.VolumeDir{Name: d.Name, Plugin: d.Plugin, Path: d.Path}
				if d.Usage != nil {
					sd.Usage = csiUsage(d.Usage)
				}
				out = append(out, sd)
			}
			return out
		},
		VolumeStatsPeriod: kc.VolumeStatsAggPeriod.Duration,
		Metrics:           agentMetrics,
	}
	if podCgroups != nil {
		sp.PodCgroup = podCgroups.PodCgroup
		sc.Pods = podCgroups.KubepodsPath()
	}
	if sc.Runtime == "" {
		pid, err := runtime.PeerPID(ctx, kc.ContainerRuntimeEndpoint)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Finding the runtime's process failed; its system container is not reported", "err", err.Error())
		}
		sp.RuntimePID = pid
	}
	sp.SystemCgroups = sc
	p, err := stats.New(sp)
	if err != nil {
		return nil, err
	}
	if err := agentMetrics.ServeVolumeStats(p); err != nil {
		return nil, fmt.Errorf("volume stats metrics: %w", err)
	}
	return p, nil
}
