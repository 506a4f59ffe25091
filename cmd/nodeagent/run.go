package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/admission"
	"github.com/nodeagent/nodeagent/pkg/allocation"
	"github.com/nodeagent/nodeagent/pkg/cgroups"
	"github.com/nodeagent/nodeagent/pkg/config"
	"github.com/nodeagent/nodeagent/pkg/eviction"
	"github.com/nodeagent/nodeagent/pkg/gc"
	"github.com/nodeagent/nodeagent/pkg/imagegc"
	"github.com/nodeagent/nodeagent/pkg/kube"
	"github.com/nodeagent/nodeagent/pkg/logs"
	"github.com/nodeagent/nodeagent/pkg/metrics"
	"github.com/nodeagent/nodeagent/pkg/mirror"
	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/objcache"
	"github.com/nodeagent/nodeagent/pkg/pleg"
	"github.com/nodeagent/nodeagent/pkg/probe"
	"github.com/nodeagent/nodeagent/pkg/runtime"
	"github.com/nodeagent/nodeagent/pkg/server"
	"github.com/nodeagent/nodeagent/pkg/status"
	podsync "github.com/nodeagent/nodeagent/pkg/sync"
	"github.com/nodeagent/nodeagent/pkg/timeline"
	"github.com/nodeagent/nodeagent/pkg/volume"
)

// runtimeStartupWait is how long start-up waits for the CRI runtime to
// answer before giving up, so an agent and a runtime started together
// still meet.
const runtimeStartupWait = 30 * time.Second

// run is the composition root: it builds every component from cfg, runs
// them until ctx ends or one fails, and waits for all of them to stop.
// Running containers are never touched on the way out.
func run(ctx context.Context, cfg *agentConfig) error {
	logger := klog.FromContext(ctx)
	kc := cfg.kubelet
	logger.Info("Starting nodeagent", "version", cfg.version, "node", cfg.nodeName,
		"containerRuntimeEndpoint", kc.ContainerRuntimeEndpoint, "rootDir", cfg.rootDir)

	// Before anything reads or writes the root dir or the runtime: one
	// agent per root dir (lock.go). This creates the root dir.
	ctx, locks, err := takeLocks(ctx, cfg)
	if err != nil {
		return err
	}
	defer locks.Close()
	if err := checkSwap(procSwaps, kc.FailSwapOn != nil && *kc.FailSwapOn); err != nil {
		return err
	}
	if err := checkSwapBehavior(kc.MemorySwap.SwapBehavior, cgroups.HostUnified()); err != nil {
		return err
	}
	started := time.Now()
	// One registry for the agent's own metrics; client-go's hooks are
	// process-wide and set once, before the first client is made.
	agentMetrics := metrics.New()
	agentMetrics.RegisterRESTClient()
	// Every pod's steps, kept for /debug/pods/ and observed as metrics.
	timelines, err := timeline.New(timeline.Config{Metrics: agentMetrics})
	if err != nil {
		return err
	}
	identity, err := newAPIServerIdentity(ctx, cfg)
	if err != nil {
		return err
	}
	client, err := newClientset(cfg, identity.rest)
	if err != nil {
		return err
	}

	// The kubelet's tracing: pods' starts and their steps, and the CRI
	// calls they make, with the trace context handed on to the runtime.
	traces, err := newTracing(ctx, kc.Tracing, cfg.hostname, cfg.version)
	if err != nil {
		return err
	}
	defer func() {
		if err := traces.shutdown(ctx); err != nil {
			logger.Error(err, "Exporting the last spans failed")
		}
	}()
	podTracer := timeline.NewTracer(timeline.TracerConfig{Provider: traces.tracerProvider()})

	cri, err := runtime.NewClient(runtime.Config{
		Endpoint:      kc.ContainerRuntimeEndpoint,
		CallTimeout:   kc.RuntimeRequestTimeout.Duration,
		Interceptors:  []grpc.UnaryClientInterceptor{agentMetrics.RuntimeInterceptor()},
		StatsHandlers: traces.criStatsHandlers(),
	})
	if err != nil {
		return err
	}
	defer cri.Close()
	version, err := waitForRuntime(ctx, cri)
	if err != nil {
		return err
	}

	// The machine's facts size the pods: memory capacity for OOM scores,
	// capacity and allocatable for the kubepods cgroup and admission.
	host := node.HostReader{RootDir: cfg.rootDir, NoEphemeralStorage: !*kc.LocalStorageCapacityIsolation}
	machine, err := host.Read()
	if err != nil {
		return err
	}
	capacity := node.Capacity(machine, kc.MaxPods)
	podCgroups, err := startCgroups(ctx, cfg, capacity)
	if err != nil {
		return err
	}

	// The eviction manager's conditions are read by admission and the node
	// status, both built before the manager.
	pressure := &eviction.Pressure{}
	admitter, err := admission.New(admission.Config{AllowedUnsafeSysctls: kc.AllowedUnsafeSysctls, KernelVersion: machine.KernelVersion, Pressure: pressure})
	if err != nil {
		return err
	}

	recorder, stopEvents := newEventRecorder(ctx, client, cfg.nodeName)
	defer stopEvents()
	// The source comes before the status manager, which merges statuses
	// with its copies of the pods, and before the dispatcher, which asks
	// it whether every pod has been listed; the dispatcher is its handler
	// once built.
	source, err := config.NewAPISource(config.Config{Client: client, NodeName: cfg.nodeName})
	if err != nil {
		return err
	}
	statusMgr, err := status.NewManager(status.Config{Client: client, Metrics: agentMetrics, Cached: source.Pod})
	if err != nil {
		return err
	}
	// The PLEG and the prober wake pods' workers in the dispatcher, which
	// is built after them; wakeups is bound to it before anything runs.
	wakeups := &podWakeups{}
	plegCfg := pleg.Config{Runtime: cri, OnChange: wakeups.wake, Metrics: agentMetrics}
	// The runtime's container events first, the relist as fallback, unless the config
	// turns the kubelet's EventedPLEG gate off (feature_gates.go).
	if gateEnabled(kc, "EventedPLEG", true) {
		plegCfg.Events = cri.ContainerEvents
	}
	podEvents, err := pleg.New(plegCfg)
	if err != nil {
		return err
	}
	// The volume manager is built after the node controller (it sizes
	// memory-backed volumes by allocatable) and before anything runs.
	var volumes *volume.Manager
	// The agent's own Node, from a watch of that one object: the node
	// status, the pod CIDR, admission and the volumes' attachments read it
	// there, as the kubelet reads its Node from an informer.
	ownNode, ownNodeInformer := watchOwnNode(client, cfg.nodeName)
	nodeCtrl, err := node.New(node.Config{
		// The node's readiness includes the PLEG's health, as a kubelet's.
		HealthChecks:           []node.HealthCheck{{Name: "PLEG", Check: podEvents.Healthy}},
		NodeName:               cfg.nodeName,
		Hostname:               cfg.hostname,
		Client:                 client,
		Runtime:                cri,
		Host:                   host,
		Clock:                  clock.RealClock{},
		NodeIPs:                cfg.nodeIPs,
		DetectNodeIP:           func() (net.IP, error) { return utilnet.ChooseHostInterface() },
		Labels:                 cfg.nodeLabels,
		Taints:                 kc.RegisterWithTaints,
		ProviderID:             kc.ProviderID,
		ExternalCloudProvider:  cfg.external,
		ControllerAttachDetach: *kc.EnableControllerAttachDetach,
		MaxPods:                kc.MaxPods,
		KubeReserved:           cfg.kubeReserved,
		SystemReserved:         cfg.systemReserved,
		EvictionHard:           cfg.evictionHard,
		MaxImages:              *kc.NodeStatusMaxImages,
		StatusUpdateFrequency:  kc.NodeStatusUpdateFrequency.Duration,
		StatusReportFrequency:  kc.NodeStatusReportFrequency.Duration,
		LeaseDurationSeconds:   kc.NodeLeaseDurationSeconds,
		KubeletPort:            kc.Port,
		KubeletVersion:         cfg.version,
		VolumesInUse:           func() []v1.UniqueVolumeName { return volumes.VolumesInUse() },
		Pressure:               pressure,
		Recorder:               recorder,
		Watched:                ownNode,
	})
	if err != nil {
		return err
	}
	csiNode := newCSINode(client, cfg.nodeName, cfg.rootDir)
	// The configMaps and secrets pods reference are watched, one object
	// each, rather than read from the apiserver at every volume refresh.
	objects, err := objcache.New(objcache.Config{Client: client})
	if err != nil {
		return err
	}
	// With the attach/detach controller managing the node's attachments,
	// its word (the Node's status.volumesAttached) is read from the watch
	// of the Node, not fetched for each volume.
	var attachedFrom func() (*v1.Node, error)
	if *kc.EnableControllerAttachDetach {
		attachedFrom = ownNode
	}
	volumes, err = volume.NewManager(volume.Config{
		RootDir:     cfg.rootDir,
		Client:      client,
		Objects:     objects,
		NodeName:    types.NodeName(cfg.nodeName),
		Allocatable: nodeCtrl.Allocatable,
		CSIDrivers:  csiNode.registry,
		Node:        attachedFrom,
		Recorder:    recorder,
	})
	if err != nil {
		return err
	}
	// As the kubelet: mount propagation of volumes needs the root dir shared.
	if err := volumes.MakeRootShared(); err != nil {
		return err
	}
	probes, err := probe.NewManager(probe.Config{
		Exec:     cri,
		Recorder: recorder,
		OnChange: wakeups.wakePod,
		Version:  majorMinor(cfg.version),
		Metrics:  agentMetrics,
	})
	if err != nil {
		return err
	}
	staticPods, err := newStaticPodSource(ctx, cfg, recorder)
	if err != nil {
		return err
	}
	env, servicesInformer := newEnvSource(client, objects)
	runtimeClasses, runtimeClassesInformer := newRuntimeClasses(client)
	var cg podsync.PodCgroups
	if podCgroups != nil {
		cg = podCgroups
	}
	allocations, err := allocation.Open(cfg.rootDir)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Starting the pods' resource allocations afresh")
	}
	pullRecords, err := newPullRecords(ctx, cfg, cri)
	if err != nil {
		return err
	}
	podUserNamespaces, err := newUserNamespaces(cfg, cri)
	if err != nil {
		return err
	}
	dispatcher, err := podsync.NewDispatcher(podsync.Config{
		Allocations:           allocations,
		PullRecords:           pullRecords,
		Runtime:               cri,
		Images:                cri,
		Cache:                 podEvents.Cache(),
		Relister:              podEvents,
		Status:                statusMgr,
		Recorder:              recorder,
		Secrets:               objects,
		Volumes:               registeringVolumes{Manager: volumes, objects: objects, userns: podUserNamespaces.Allocator},
		UserNamespaces:        podUserNamespaces,
		Env:                   env,
		RuntimeClasses:        runtimeClasses,
		Allocatable:           nodeCtrl.Allocatable,
		VolumeRefreshPeriod:   kc.SyncFrequency.Duration,
		ResyncPeriod:          kc.SyncFrequency.Duration,
		ResyncJitter:          0.5,
		Probes:                probes,
		Hooks:                 probes,
		PodOptions:            podOptions(cfg),
		Resources:             containerResourceOptions(cfg, machine),
		Cgroups:               cg,
		Admitter:              admitter,
		Node:                  nodeCtrl.AdmissionNode,
		RootDir:               cfg.rootDir,
		NodeIPs:               hostIPs(cfg),
		RuntimeName:           version.RuntimeName,
		Known:                 func() []runtime.PodRef { return knownPods(ctx, podEvents.Cache().UIDs(), volumes, podCgroups) },
		KnownPod:              func(uid types.UID) bool { return knownPod(uid, podEvents.Cache(), volumes, podCgroups) },
		SourceSynced:          func() bool { return source.HasSynced() && staticPods.HasSynced() },
		MaxRestartBackoff:     maxRestartBackoff(kc),
		CreateStartDelay:      cfg.createStartDelay,
		MaxParallelImagePulls: maxParallelImagePulls(kc),
		Metrics:               agentMetrics,
		Timeline:              timelines,
		Tracer:                podTracer,
	})
	if err != nil {
		return err
	}
	wakeups.bind(dispatcher)
	if err := source.SetHandler(dispatcher); err != nil {
		return err
	}
	mirrors, err := mirror.New(mirror.Config{
		Client:       client,
		NodeName:     cfg.nodeName,
		StaticPods:   staticPods.Pods,
		MirrorPods:   source.MirrorPods,
		Listed:       func() bool { return source.HasSynced() && staticPods.HasSynced() },
		StillRunning: dispatcher.Running,
	})
	if err != nil {
		return err
	}
	if err := source.SetMirrorHandler(mirrors); err != nil {
		return err
	}
	if err := staticPods.SetHandler(staticPodHandlers{dispatcher, mirrors}); err != nil {
		return err
	}

	// Container GC reads the PLEG's view and asks the dispatcher which
	// pods it holds, so it comes after both.
	collector, err := gc.New(gc.Config{
		Runtime:    cri,
		View:       podEvents.Cache(),
		Held:       dispatcher.PodsHeld,
		Listed:     func() bool { return source.HasSynced() && staticPods.HasSynced() },
		PodLogsDir: kc.PodLogsDir,
	})
	if err != nil {
		return err
	}

	logMaxSize := resource.MustParse(kc.ContainerLogMaxSize) // validated
	logRotator, err := logs.New(logs.Config{
		Runtime:  cri,
		MaxSize:  logMaxSize.Value(),
		MaxFiles: int(*kc.ContainerLogMaxFiles),
		Interval: kc.ContainerLogMonitorInterval.Duration,
		Running:  podEvents.Cache().RunningContainers,
	})
	if err != nil {
		return err
	}
	var healthz *server.Healthz
	if port := *kc.HealthzPort; port > 0 {
		if healthz, err = server.NewHealthz(server.HealthzConfig{BindAddress: kc.HealthzBindAddress, Port: port}); err != nil {
			return err
		}
	}
	serving, err := newServingCertificate(ctx, cfg, client, nodeCtrl.Addresses)
	if err != nil {
		return err
	}
	nodeStats, err := newStatsProvider(ctx, cfg, cri, dispatcher.Pods, podCgroups, volumes, started, agentMetrics)
	if err != nil {
		return err
	}
	// Image GC measures the image filesystem as the Summary API does, and
	// records its events on the Node as the static pod sources do.
	imageCollector, err := imagegc.New(imagegc.Config{
		Runtime:  cri,
		ImageFs:  nodeStats,
		Recorder: recorder,
		Node:     &v1.ObjectReference{Kind: "Node", Name: cfg.nodeName, UID: types.UID(cfg.nodeName)},
		Policy: imagegc.Policy{
			HighThresholdPercent: int(*kc.ImageGCHighThresholdPercent),
			LowThresholdPercent:  int(*kc.ImageGCLowThresholdPercent),
			MinAge:               kc.ImageMinimumGCAge.Duration,
			MaxAge:               kc.ImageMaximumGCAge.Duration,
		},
		Period:  cfg.imageGCPeriod,
		Metrics: agentMetrics,
	})
	if err != nil {
		return err
	}
	evictionMgr, err := newEvictionManager(cfg, evictionDeps{
		stats: nodeStats, pods: dispatcher, images: imageCollector, containers: collector,
		imageFsInfo: func(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
			return cri.ImageService().ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
		},
		recorder: recorder, pressure: pressure, metrics: agentMetrics,
	})
	if err != nil {
		return err
	}
	nodeAPI, err := newNodeServer(cfg, client, cri.RuntimeService(), dispatcher.Pods, nodeAPIExtras{
		stats: nodeStats, metrics: agentMetrics, serving: serving, timeline: timelines.Handler(),
	})
	if err != nil {
		return err
	}

	podNetwork, err := newPodNetwork(ctx, cfg, client)
	if err != nil {
		return err
	}

	// Everything is built; start it all.
	g, gctx := errgroup.WithContext(ctx)
	if healthz != nil {
		g.Go(func() error { return healthz.Run(gctx) })
	}
	if identity.rotation != nil {
		g.Go(func() error { return identity.rotation.Run(gctx) })
	}
	if serving != nil {
		g.Go(func() error { return serving.Run(gctx) })
	}
	if nodeAPI != nil {
		g.Go(func() error { return nodeAPI.Run(gctx) })
	} else {
		logger.Info("The node API is off (enableServer: false): nothing listens on its port")
	}
	g.Go(func() error { return nodeStats.Run(gctx) })
	g.Go(func() error { return nodeCtrl.Run(gctx) })
	g.Go(func() error { return statusMgr.Run(gctx) })
	g.Go(func() error { return podEvents.Run(gctx) })
	g.Go(func() error { return probes.Run(gctx) })
	g.Go(func() error { return dispatcher.Run(gctx) })
	g.Go(func() error { return logRotator.Run(gctx) })
	g.Go(func() error { return collector.Run(gctx) })
	g.Go(func() error { return imageCollector.Run(gctx) })
	g.Go(func() error { return evictionMgr.Run(gctx) })
	g.Go(func() error { return source.Run(gctx) })
	g.Go(func() error { return staticPods.Run(gctx) })
	g.Go(func() error { return mirrors.Run(gctx) })
	g.Go(func() error { return csiNode.Run(gctx) })
	g.Go(func() error { return volumes.RunExpansion(gctx) })
	g.Go(func() error { return objects.Run(gctx) })
	if podNetwork != nil {
		g.Go(func() error { return podNetwork(gctx) })
	}
	g.Go(func() error {
		kube.Start(gctx, servicesInformer, runtimeClassesInformer, ownNodeInformer)()
		return nil
	})
	return g.Wait()
}

// watchOwnNode returns a reader of this node's Node fed by a watch of that
// one object, as the kubelet watches its own Node, and the informer to
// run. The reader fails with NotFound until the watch has the Node.
func watchOwnNode(client kube.Interface, nodeName string) (func() (*v1.Node, error), cache.SharedIndexInformer) {
	inf := kube.NewInformer(client, client.CoreV1().Nodes(), &v1.Node{}, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector(metav1.ObjectNameField, nodeName).String()
	})
	lister := corelisters.NewNodeLister(inf.GetIndexer())
	return func() (*v1.Node, error) { return lister.Get(nodeName) }, inf
}

// newClientset builds the apiserver client from the agent's identity
// with the QPS, burst and content type of the configuration.
func newClientset(cfg *agentConfig, restCfg *rest.Config) (kube.Interface, error) {
	restCfg = rest.CopyConfig(restCfg)
	kc := cfg.kubelet
	restCfg.UserAgent = fmt.Sprintf("nodeagent/%s (%s)", cfg.version, cfg.nodeName)
	restCfg.QPS = float32(*kc.KubeAPIQPS)
	restCfg.Burst = int(kc.KubeAPIBurst)
	restCfg.ContentType = kc.ContentType
	client, err := kube.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("build apiserver client: %w", err)
	}
	return client, nil
}

// waitForRuntime checks that the runtime answers, retrying for a while.
func waitForRuntime(ctx context.Context, cri *runtime.Client) (*runtimeapi.VersionResponse, error) {
	logger := klog.FromContext(ctx)
	deadline := time.Now().Add(runtimeStartupWait)
	for {
		v, err := cri.Version(ctx)
		if err == nil {
			logger.Info("Connected to container runtime", "name", v.RuntimeName, "version", v.RuntimeVersion, "criVersion", v.RuntimeApiVersion)
			return v, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("container runtime did not answer within %s: %w", runtimeStartupWait, err)
		}
		logger.Info("Waiting for the container runtime", "err", err.Error())
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// majorMinor turns the agent's Kubernetes version ("v1.37.1") into the
// "1.37" probes put in their User-Agent; empty when it is unknown.
func majorMinor(v string) string {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 || parts[0] == "0" {
		return ""
	}
	return parts[0] + "." + parts[1]
}
