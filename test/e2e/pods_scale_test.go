//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/test/e2e/framework"
	"github.com/nodeagent/nodeagent/test/harness"
)

// sandboxNetns is the network namespace path of a sandbox, from the runtime's verbose status.
func sandboxNetns(t *testing.T, id string) string {
	t.Helper()
	rt, _ := framework.CRI(t)
	resp, err := rt.PodSandboxStatus(framework.Context(t, 30*time.Second), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		t.Fatalf("sandbox status %s: %v", id, err)
	}
	var info struct {
		RuntimeSpec struct {
			Linux struct {
				Namespaces []struct{ Type, Path string }
			}
		}
	}
	if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil {
		t.Fatalf("sandbox %s verbose info: %v", id, err)
	}
	for _, ns := range info.RuntimeSpec.Linux.Namespaces {
		if ns.Type == "network" {
			return ns.Path
		}
	}
	t.Fatalf("sandbox %s has no network namespace in its spec", id)
	return ""
}

// TestFiftyPodsAtOnce: 50 pods created together all reach Running; deleted together, they
// are all gone, with no sandbox, container, mount, pod directory or network namespace left.
func TestFiftyPodsAtOnce(t *testing.T) {
	t.Parallel()
	requireNodeagent(t)
	cs := framework.Client(t)
	ctx := framework.Context(t, 8*time.Minute)
	const n = 50
	pods := make([]*corev1.Pod, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := cs.CoreV1().Pods(podNS).Create(ctx, busyboxPod("fifty", corev1.RestartPolicyAlways, "trap 'exit 0' TERM; sleep 3600 & wait"), metav1.CreateOptions{})
			if err != nil {
				errs <- err
				return
			}
			pods[i] = p
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		for _, p := range pods {
			_ = cs.CoreV1().Pods(podNS).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
	})
	var netns []string
	for _, p := range pods {
		waitPod(t, p, 4*time.Minute, runningAndReady)
		sbs := sandboxesOf(t, string(p.UID))
		if len(sbs) != 1 {
			t.Fatalf("pod %s has %d sandboxes, want 1", p.Name, len(sbs))
		}
		netns = append(netns, sandboxNetns(t, sbs[0].Id))
	}
	for _, p := range pods {
		if err := cs.CoreV1().Pods(podNS).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rt, _ := framework.CRI(t)
	framework.Eventually(t, 3*time.Minute, func() error {
		for _, p := range pods {
			if _, err := cs.CoreV1().Pods(podNS).Get(ctx, p.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("pod %s still in the apiserver (%v)", p.Name, err)
			}
		}
		for _, p := range pods {
			if sbs := sandboxesOf(t, string(p.UID)); len(sbs) > 0 {
				return fmt.Errorf("pod %s still has %d sandboxes", p.Name, len(sbs))
			}
			resp, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
				LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(p.UID)}}})
			if err != nil {
				return err
			}
			if len(resp.Containers) > 0 {
				return fmt.Errorf("pod %s still has %d containers", p.Name, len(resp.Containers))
			}
			dir := filepath.Join(agentRootDir(t), "pods", string(p.UID))
			if m := harness.MountsUnder(dir); len(m) > 0 {
				return fmt.Errorf("pod %s still has mounts %v", p.Name, m)
			}
			if _, err := os.Lstat(dir); err == nil {
				return fmt.Errorf("pod %s directory %s is still there", p.Name, dir)
			}
		}
		for _, ns := range netns {
			if m := harness.MountsUnder(ns); len(m) > 0 {
				return fmt.Errorf("network namespace %s is still mounted", ns)
			}
			if _, err := os.Lstat(ns); err == nil {
				return fmt.Errorf("network namespace file %s is still there", ns)
			}
		}
		return nil
	})
}
