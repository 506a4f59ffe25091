package main

import (
	"context"
	"testing"
	"time"

	"github.com/nodeagent/nodeagent/pkg/config"
)

// The kubeadm file that loads without warnings (TestKubeadmZeroValuesGetDefaults)
// also gets its static pods: staticPodPath is read, every 20s by default.
func TestKubeadmConfigRunsStaticPods(t *testing.T) {
	kc, warnings, err := loadKubeletConfig("testdata/kubeadm-config.yaml", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings: %v", warnings)
	}
	cfg := &agentConfig{kubelet: kc, nodeName: "cp-1"}
	sc := staticSourceConfig(cfg, nil)
	if sc.Dir != "/etc/kubernetes/manifests" || sc.Period != 20*time.Second || sc.NodeName != "cp-1" {
		t.Errorf("static pod source config = %+v", sc)
	}
	src, err := newStaticPodSource(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := src.(*config.FileSource); !ok {
		t.Errorf("source = %T, want the file source", src)
	}

	kc.StaticPodPath = ""
	if src, _ := newStaticPodSource(context.Background(), cfg, nil); src.HasSynced() != true || len(src.Pods()) != 0 {
		t.Error("without staticPodPath the source must be empty and synced")
	}
}
