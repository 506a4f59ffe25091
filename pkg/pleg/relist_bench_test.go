package pleg

import (
	"context"
	"fmt"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// BenchmarkRelist is one relist of a node with 100 running pods of one container each
// where nothing changed: the PLEG's steady state, once a second.
func BenchmarkRelist(b *testing.B) {
	ctx := context.Background()
	rt := critesting.NewFakeRuntimeService()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	changes := 0
	p, err := New(Config{Runtime: rt, Clock: clk, OnChange: func(runtime.PodRef) { changes++ }})
	if err != nil {
		b.Fatal(err)
	}
	runningPods(ctx, rt, 100)
	if err := p.Relist(ctx); err != nil || changes != 100 {
		b.Fatalf("first relist: %v, %d changes", err, changes)
	}
	b.ReportAllocs()
	for b.Loop() {
		clk.Step(time.Second)
		if err := p.Relist(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if changes != 100 {
		b.Fatalf("%d changes reported for an unchanged node", changes-100)
	}
}

// BenchmarkRelistPod is what a worker's action or a container event costs the PLEG since
// podrelist.go: one pod of the same 100 relisted alone, where BenchmarkRelist relists all.
func BenchmarkRelistPod(b *testing.B) {
	ctx := context.Background()
	rt := critesting.NewFakeRuntimeService()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	p, err := New(Config{Runtime: rt, Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	runningPods(ctx, rt, 100)
	if err := p.Relist(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		clk.Step(time.Second)
		if err := p.relistPod(ctx, "u042"); err != nil {
			b.Fatal(err)
		}
	}
	if st, _ := p.Cache().Get("u042"); len(st.Containers) != 1 {
		b.Fatalf("u042 cached as %+v", st)
	}
}

// runningPods gives rt n pods u000… of one running container each.
func runningPods(ctx context.Context, rt *critesting.FakeRuntimeService, n int) {
	for i := range n {
		uid := fmt.Sprintf("u%03d", i)
		sbCfg := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p" + uid, Namespace: "ns", Uid: uid},
			Labels: map[string]string{runtime.LabelPodUID: uid, runtime.LabelPodName: "p" + uid, runtime.LabelPodNamespace: "ns"}}
		sb, _ := rt.RunPodSandbox(ctx, sbCfg, "")
		cfg := &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: "busybox"},
			Labels:      map[string]string{runtime.LabelPodUID: uid, runtime.LabelContainer: "c"},
			Annotations: map[string]string{runtime.AnnotationRestartCount: "0"}}
		id, _ := rt.CreateContainer(ctx, sb, cfg, sbCfg)
		_ = rt.StartContainer(ctx, id)
	}
}
