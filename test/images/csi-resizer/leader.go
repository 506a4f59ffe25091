package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// leader runs the controller only while this replica holds the driver's Lease
// (--leader-election), as external-resizer's replicas share one driver.
type leader struct {
	lock   *resourcelock.LeaseLock
	cfg    leaderelection.LeaderElectionConfig
	health *leaderelection.HealthzAdaptor
}

// newLeader sets up the election for the lease external-resizer-<driver> in
// --leader-election-namespace (default: the pod's).
func newLeader(client kubernetes.Interface, o options, driver string) *leader {
	ns := o.leaderElectionNamespace
	if ns == "" {
		ns = podNamespace()
	}
	id, err := os.Hostname()
	if err != nil || id == "" {
		id = fmt.Sprintf("csi-resizer-%d", os.Getpid())
	}
	l := &leader{health: leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)}
	l.lock = &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: leaseName(driver)},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: sanitize(id)},
		Labels:     o.leaderElectionLabels,
	}
	l.cfg = leaderelection.LeaderElectionConfig{
		Lock:            l.lock,
		LeaseDuration:   o.leaseDuration,
		RenewDeadline:   o.renewDeadline,
		RetryPeriod:     o.retryPeriod,
		ReleaseOnCancel: o.gates.ReleaseLeaderElectionOnExit,
		WatchDog:        l.health,
		Name:            l.lock.LeaseMeta.Name,
	}
	return l
}

// run waits for the lease, then runs work until ctx ends or the lease is lost. A lost
// lease is an error: the container restarts and stands again, as upstream's does.
func (l *leader) run(ctx context.Context, work func(context.Context) error) error {
	logger := klog.FromContext(ctx).WithValues("lease", l.lock.LeaseMeta.Namespace+"/"+l.lock.LeaseMeta.Name)
	leading := make(chan context.Context, 1)
	cfg := l.cfg
	cfg.Callbacks = leaderelection.LeaderCallbacks{
		// The context ends when the elector stops: ctx ended or the lease was lost.
		OnStartedLeading: func(ctx context.Context) { leading <- ctx },
		OnStoppedLeading: func() {},
		OnNewLeader:      func(id string) { logger.Info("New leader", "identity", id) },
	}
	elector, err := leaderelection.NewLeaderElector(cfg)
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	logger.Info("Waiting for the lease")
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		elector.Run(ctx)
	}()
	var workErr error
	select {
	case leadCtx := <-leading:
		logger.Info("Became the leader")
		workErr = work(leadCtx)
		<-stopped
	case <-stopped:
	}
	if ctx.Err() == nil {
		return errors.Join(errors.New("lost the lease"), workErr)
	}
	return workErr
}

// serveHealth serves /healthz and, with leader election, /healthz/leader-election (which
// fails while this replica holds a lease it failed to renew) on addr.
func serveHealth(addr string, l *leader) (stop func(), err error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http endpoint: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	if l != nil {
		mux.HandleFunc("/healthz/leader-election", func(w http.ResponseWriter, r *http.Request) {
			if err := l.health.Check(r); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			_, _ = w.Write([]byte("ok"))
		})
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	return func() { _ = srv.Close() }, nil
}

// podNamespace is this pod's namespace: $POD_NAMESPACE, else the service account's.
func podNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if data, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		if ns := strings.TrimSpace(string(data)); ns != "" {
			return ns
		}
	}
	return "default"
}

var notNameChar = regexp.MustCompile(`[^a-zA-Z0-9-]`)

// leaseName is the lease of driver's resizers: external-resizer-<driver>, with what a
// name may not hold replaced.
func leaseName(driver string) string { return "external-resizer-" + sanitize(driver) }

// sanitize replaces the characters an object name may not hold with "-" and keeps it from
// ending in one.
func sanitize(s string) string {
	s = notNameChar.ReplaceAllString(s, "-")
	if strings.HasSuffix(s, "-") {
		s += "X"
	}
	return s
}
