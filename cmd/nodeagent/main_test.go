package main

import (
	"bytes"
	"errors"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionFromBuildInfo(t *testing.T) {
	tests := []struct {
		name string
		deps []*debug.Module
		want string
	}{
		{name: "release", deps: []*debug.Module{{Path: "k8s.io/api", Version: "v0.1.0"}, {Path: "k8s.io/client-go", Version: "v0.37.1"}}, want: "v1.37.1"},
		{name: "pre-release", deps: []*debug.Module{{Path: "k8s.io/client-go", Version: "v0.38.0-rc.1"}}, want: "v1.38.0-rc.1"},
		{name: "replaced", deps: []*debug.Module{{Path: "k8s.io/client-go", Version: "v0.37.0", Replace: &debug.Module{Version: "v0.37.2"}}}, want: "v1.37.2"},
		{name: "absent", deps: nil, want: unknownVersion},
		{name: "not a staging version", deps: []*debug.Module{{Path: "k8s.io/client-go", Version: "(devel)"}}, want: unknownVersion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := versionFromBuildInfo(&debug.BuildInfo{Deps: tt.deps}); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRunMainVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := runMain([]string{"--version"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.HasPrefix(out.String(), "Kubernetes v") {
		t.Errorf("--version printed %q", out.String())
	}
}

func TestRunMainRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := writeFile(t, dir, "bad.yaml", header+"nodeLeaseDurationSeconds: -1\n")
	runOnce := writeFile(t, dir, "runonce.yaml", header+"runOnce: true\nfeatureGates:\n  Foo: true\n")
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{name: "unknown flag", args: []string{"--no-such-flag"}, code: 2, want: "unknown flag: --no-such-flag"},
		{name: "invalid config", args: []string{"--config=" + bad}, code: 1, want: "nodeLeaseDurationSeconds: must be > 0"},
		{name: "refused field", args: []string{"--config=" + runOnce}, code: 1, want: "runOnce: run-once mode is not implemented"},
		{name: "unknown feature gate", args: []string{"--config=" + runOnce}, code: 1, want: "featureGates: unrecognized feature gate: Foo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := runMain(tt.args, &out, &errOut); code != tt.code || !strings.Contains(errOut.String(), tt.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, errOut.String(), tt.code, tt.want)
			}
		})
	}
}

// baseArgs is how the harness starts the agent, minus the runtime.
func baseArgs(t *testing.T) []string {
	dir := t.TempDir()
	kubeconfig := writeFile(t, dir, "kubelet.conf", "apiVersion: v1\nkind: Config\n")
	cfg := writeFile(t, dir, "config.yaml", header+"cgroupDriver: cgroupfs\nclusterDNS: [10.96.0.10]\nclusterDomain: cluster.local\n")
	return []string{"--config=" + cfg, "--kubeconfig=" + kubeconfig, "--container-runtime-endpoint=unix:///run/x.sock",
		"--node-ip=10.1.0.2", "--hostname-override=NodeAgent-Node", "--root-dir=" + filepath.Join(dir, "root"), "--v=2"}
}

func TestBuildConfigFromHarnessFlags(t *testing.T) {
	f := newFlags(newKlogFlags())
	args := append(baseArgs(t), "--pod-infra-container-image=pause:3.10", "--fail-swap-on=false", "--cgroup-driver=systemd",
		"--cgroup-root=/kubelet", "--eviction-hard=memory.available<200Mi", "--feature-gates=AllAlpha=true",
		"--containerd=/run/containerd/containerd.sock",
		"--register-with-taints=a=b:NoSchedule", "--node-labels=node.kubernetes.io/pool=x")
	warnings, err := f.parse(args)
	if err != nil {
		t.Fatal(err)
	}
	cfg, buildWarnings, err := buildConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	warnings = append(warnings, buildWarnings...)
	if cfg.nodeName != "nodeagent-node" || cfg.kubelet.ContainerRuntimeEndpoint != "unix:///run/x.sock" ||
		cfg.nodeIPs[0].String() != "10.1.0.2" || cfg.certDir != filepath.Join(cfg.rootDir, "pki") {
		t.Errorf("cfg = %+v", cfg)
	}
	if len(cfg.kubelet.RegisterWithTaints) != 1 || cfg.nodeLabels["node.kubernetes.io/pool"] != "x" {
		t.Errorf("taints %v labels %v", cfg.kubelet.RegisterWithTaints, cfg.nodeLabels)
	}
	// Deprecated flags that mirror a config field win over the file, as with the kubelet.
	kc := cfg.kubelet
	if kc.CgroupDriver != "systemd" || kc.CgroupRoot != "/kubelet" || kc.FailSwapOn == nil || *kc.FailSwapOn ||
		len(kc.EvictionHard) != 1 || kc.EvictionHard["memory.available"] != "200Mi" || !kc.FeatureGates["AllAlpha"] {
		t.Errorf("config-mirror flags not applied: driver %q root %q failSwapOn %v evictionHard %v gates %v",
			kc.CgroupDriver, kc.CgroupRoot, kc.FailSwapOn, kc.EvictionHard, kc.FeatureGates)
	}
	joined := strings.Join(warnings, "\n")
	for _, name := range []string{"--fail-swap-on", "--cgroup-driver", "--cgroup-root", "--containerd", "--pod-infra-container-image"} {
		if strings.Count(joined, name+" ") != 1 {
			t.Errorf("want one warning naming %s, got:\n%s", name, joined)
		}
	}
}

func TestBuildConfigErrors(t *testing.T) {
	tests := []struct {
		name  string
		extra []string
		want  string
		is    error
	}{
		{name: "missing kubeconfig, missing bootstrap", extra: []string{"--kubeconfig=/nonexistent/kubelet.conf", "--bootstrap-kubeconfig=/nonexistent/b.conf"}, want: "--bootstrap-kubeconfig"},
		{name: "missing kubeconfig", extra: []string{"--kubeconfig=/nonexistent/kubelet.conf"}, want: "does not exist"},
		{name: "forbidden label", extra: []string{"--node-labels=node-role.kubernetes.io/worker="}, want: "node-role.kubernetes.io/worker"},
		{name: "bad node ip", extra: []string{"--node-ip=10.1"}, want: "--node-ip"},
		{name: "bad taint", extra: []string{"--register-with-taints=a"}, want: "--register-with-taints"},
		{name: "bad cloud provider", extra: []string{"--cloud-provider=aws"}, want: "--cloud-provider"},
		{name: "bad config-mirror flag", extra: []string{"--max-pods=many"}, want: "--max-pods"},
		{name: "config-mirror flag fails validation", extra: []string{"--max-pods=-1"}, want: "maxPods"},
		{name: "image GC period", extra: []string{"--image-gc-period=0s"}, want: "--image-gc-period"},
		{name: "exit on lock contention without a lock file", extra: []string{"--exit-on-lock-contention"}, want: "no --lock-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFlags(newKlogFlags())
			if _, err := f.parse(append(baseArgs(t), tt.extra...)); err != nil {
				t.Fatal(err)
			}
			_, _, err := buildConfig(f)
			if err == nil || (tt.is != nil && !errors.Is(err, tt.is)) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v", err)
			}
		})
	}
}
