package sync

import (
	"context"
	"fmt"
	"reflect"
	gosync "sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
	"github.com/nodeagent/nodeagent/pkg/runtime"
	"github.com/nodeagent/nodeagent/pkg/status"
)

func TestAfterSandbox(t *testing.T) {
	sb := &runtime.SandboxStatus{ID: "new", Attempt: 1, Ready: true, IPs: []string{"10.1.0.5"}}
	old := func() *runtime.PodStatus {
		return &runtime.PodStatus{PodRef: runtime.PodRef{UID: "uid-1"},
			Sandboxes:  []*runtime.SandboxStatus{{ID: "sb", Ready: true, IPs: []string{"10.1.0.4"}}},
			Containers: []*runtime.ContainerStatus{{ID: "c1", SandboxID: "sb", Name: "a", State: runtime.ContainerExited, ExitCode: 2}},
		}
	}
	tests := []struct {
		name   string
		in     *runtime.PodStatus
		wantOK bool
		// wantSandboxes: IDs and readiness, in order.
		wantSandboxes []string
		wantIn        string // the IP LatestSandbox gives
	}{
		{name: "nothing observed", in: nil, wantOK: true, wantSandboxes: []string{"new:ready"}, wantIn: "10.1.0.5"},
		{name: "a new pod", in: &runtime.PodStatus{PodRef: runtime.PodRef{UID: "uid-1"}}, wantOK: true,
			wantSandboxes: []string{"new:ready"}, wantIn: "10.1.0.5"},
		{name: "the old sandbox stopped, its containers ended", in: old(), wantOK: true,
			wantSandboxes: []string{"new:ready", "sb:stopped"}, wantIn: "10.1.0.5"},
		{name: "a running container was stopped", in: mutate(old(), func(s *runtime.PodStatus) {
			s.Containers[0].State = runtime.ContainerRunning
		})},
		{name: "a created container was stopped", in: mutate(old(), func(s *runtime.PodStatus) {
			s.Containers[0].State = runtime.ContainerCreated
		})},
		{name: "a container in an unknown state was stopped", in: mutate(old(), func(s *runtime.PodStatus) {
			s.Containers[0].State = runtime.ContainerUnknown
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before *runtime.PodStatus
			if tt.in != nil {
				before = mutate(tt.in, func(*runtime.PodStatus) {})
			}
			got, ok := afterSandbox(tt.in, sb)
			if ok != tt.wantOK {
				t.Fatalf("ok = %t, want %t", ok, tt.wantOK)
			}
			if tt.in != nil && !reflect.DeepEqual(tt.in, before) {
				t.Errorf("the observation was changed: %+v", tt.in)
			}
			if !ok {
				return
			}
			var sandboxes []string
			for _, s := range got.Sandboxes {
				state := "stopped"
				if s.Ready {
					state = "ready"
				}
				sandboxes = append(sandboxes, s.ID+":"+state)
			}
			if !reflect.DeepEqual(sandboxes, tt.wantSandboxes) {
				t.Errorf("sandboxes = %v, want %v", sandboxes, tt.wantSandboxes)
			}
			if ips := got.LatestSandbox().IPs; len(ips) != 1 || ips[0] != tt.wantIn {
				t.Errorf("the pod's sandbox has %v, want [%s]", ips, tt.wantIn)
			}
			if tt.in != nil && !reflect.DeepEqual(got.Containers, tt.in.Containers) {
				t.Errorf("containers = %+v, want those observed", got.Containers)
			}
		})
	}
}

// mutate returns a deep copy of s changed by fn.
func mutate(s *runtime.PodStatus, fn func(*runtime.PodStatus)) *runtime.PodStatus {
	out := &runtime.PodStatus{PodRef: s.PodRef}
	for _, sb := range s.Sandboxes {
		c := *sb
		out.Sandboxes = append(out.Sandboxes, &c)
	}
	for _, c := range s.Containers {
		cc := *c
		out.Containers = append(out.Containers, &cc)
	}
	fn(out)
	return out
}

// gatedPuller is an image service whose pulls wait for release.
type gatedPuller struct {
	Images
	started, release chan struct{}
	once             gosync.Once
}

func (g *gatedPuller) PullImage(ctx context.Context, img *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, cfg *runtimeapi.PodSandboxConfig) (string, error) {
	g.once.Do(func() { close(g.started) })
	select {
	case <-g.release:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return g.Images.PullImage(ctx, img, auth, cfg)
}

// statusLog records every status the worker hands its writer, and
// passes it on.
type statusLog struct {
	StatusWriter
	mu   gosync.Mutex
	sets []v1.PodStatus
}

func (l *statusLog) Set(pod *v1.Pod, st v1.PodStatus) {
	l.mu.Lock()
	l.sets = append(l.sets, *st.DeepCopy())
	l.mu.Unlock()
	l.StatusWriter.Set(pod, st)
}

func (l *statusLog) all() []v1.PodStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]v1.PodStatus(nil), l.sets...)
}

// A pass that makes the sandbox has the pod's status written with
// PodReadyToStartContainers and the pod's address while it still pulls
// the image, and no status after it says less.
func TestSandboxReadyWrittenBeforeImagePull(t *testing.T) {
	tests := []struct {
		name   string
		mut    func(*v1.Pod)
		wantIP string
	}{
		{name: "pod network", mut: func(*v1.Pod) {}, wantIP: critesting.FakePodSandboxIPs[0]},
		{name: "host network", mut: func(p *v1.Pod) { p.Spec.HostNetwork = true }, wantIP: "10.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testSandboxReadyBeforePull(t, basePod(func(p *v1.Pod) {
				p.Spec.Containers = []v1.Container{{Name: "a", Image: "example.com/slow:1"}}
			}, tt.mut), tt.wantIP)
		})
	}
}

func testSandboxReadyBeforePull(t *testing.T, pod *v1.Pod, wantIP string) {
	h := newHarness(t, pod)
	client := fake.NewClientset(pod.DeepCopy())
	manager, err := status.NewManager(status.Config{Client: kubetest.Wrap(client)})
	if err != nil {
		t.Fatal(err)
	}
	log := &statusLog{StatusWriter: manager}
	h.w.deps.status = log
	puller := &gatedPuller{Images: h.img, started: make(chan struct{}), release: make(chan struct{})}
	h.w.deps.images = puller

	ctx, cancel := context.WithCancel(context.Background())
	var wg gosync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = manager.Run(ctx) }()
	go func() { defer wg.Done(); h.w.run(ctx) }()
	released := false
	defer func() {
		if !released {
			close(puller.release)
		}
		cancel()
		wg.Wait()
	}()
	h.w.poke()

	select {
	case <-puller.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the pull never started")
	}
	// The pull hangs until released: what the worker handed over so far,
	// it handed over before the pull could return.
	sets := log.all()
	if len(sets) != 1 {
		t.Fatalf("%d statuses handed over before the pull, want the sandbox's one", len(sets))
	}
	early := sets[0]
	if c := condition(&early, v1.PodReadyToStartContainers); c == nil || c.Status != v1.ConditionTrue || c.LastTransitionTime.IsZero() {
		t.Errorf("PodReadyToStartContainers = %+v, want True with a transition time", c)
	}
	if early.PodIP != wantIP || len(early.PodIPs) != 1 || early.PodIPs[0].IP != wantIP || early.HostIP != "10.0.0.1" {
		t.Errorf("podIP %q podIPs %v hostIP %q, want %s and the node's 10.0.0.1", early.PodIP, early.PodIPs, early.HostIP, wantIP)
	}
	// Nothing more than is true: the container is still being created.
	if early.Phase != v1.PodPending {
		t.Errorf("phase = %s, want Pending", early.Phase)
	}
	if cs := early.ContainerStatuses; len(cs) != 1 || cs[0].State.Waiting == nil || cs[0].State.Waiting.Reason != status.ReasonContainerCreating || cs[0].Ready {
		t.Errorf("container statuses = %+v, want a waiting in ContainerCreating", cs)
	}
	if c := condition(&early, v1.PodReady); c == nil || c.Status != v1.ConditionFalse {
		t.Errorf("Ready = %+v, want False", c)
	}

	// The writer sends it out while the pull still hangs.
	written := waitFor(t, client, pod, "the pod's sandbox", func(st v1.PodStatus) bool {
		c := condition(&st, v1.PodReadyToStartContainers)
		return c != nil && c.Status == v1.ConditionTrue && st.PodIP == wantIP
	})
	select {
	case <-puller.release:
		t.Fatal("the pull was released")
	default:
	}

	close(puller.release)
	released = true
	final := waitFor(t, client, pod, "container a running", func(st v1.PodStatus) bool {
		return len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Running != nil
	})
	if got, want := condition(&final, v1.PodReadyToStartContainers).LastTransitionTime, condition(&written, v1.PodReadyToStartContainers).LastTransitionTime; !got.Equal(&want) {
		t.Errorf("PodReadyToStartContainers moved from %v to %v", want, got)
	}
	if final.PodIP != wantIP {
		t.Errorf("podIP = %q, want %s", final.PodIP, wantIP)
	}

	sets = log.all()
	for i := 1; i < len(sets); i++ {
		if r := regression(sets[i-1], sets[i]); r != "" {
			t.Errorf("status %d goes back on the one before: %s", i, r)
		}
	}
}

// waitFor waits until the apiserver's status of pod satisfies ok.
func waitFor(t *testing.T, client *fake.Clientset, pod *v1.Pod, what string, ok func(v1.PodStatus) bool) v1.PodStatus {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := client.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ok(got.Status) {
			return got.Status
		}
		if time.Now().After(deadline) {
			t.Fatalf("the apiserver never showed %s: %+v", what, got.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// regression says how next goes back on prev, for a pod that keeps
// running: "" when it does not.
func regression(prev, next v1.PodStatus) string {
	for _, t := range []v1.PodConditionType{v1.PodReadyToStartContainers, v1.PodScheduled} {
		if p, n := condition(&prev, t), condition(&next, t); p != nil && p.Status == v1.ConditionTrue && (n == nil || n.Status != v1.ConditionTrue) {
			return fmt.Sprintf("%s no longer True: %+v", t, n)
		}
	}
	if prev.PodIP != "" && next.PodIP != prev.PodIP {
		return fmt.Sprintf("podIP %q became %q", prev.PodIP, next.PodIP)
	}
	if prev.Phase == v1.PodRunning && next.Phase != v1.PodRunning {
		return fmt.Sprintf("phase Running became %s", next.Phase)
	}
	for i, p := range prev.ContainerStatuses {
		if p.State.Running != nil && (i >= len(next.ContainerStatuses) || next.ContainerStatuses[i].State.Running == nil) {
			return fmt.Sprintf("container %s no longer running", p.Name)
		}
	}
	return ""
}
