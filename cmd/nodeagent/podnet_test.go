package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeagent/nodeagent/pkg/podnet"
)

func TestPodNetworkFlags(t *testing.T) {
	tests := []struct {
		name    string
		extra   []string
		wantErr string
		check   func(t *testing.T, cfg *agentConfig)
	}{
		{
			name: "off by default",
			check: func(t *testing.T, cfg *agentConfig) {
				if cfg.podNetwork != nil {
					t.Errorf("podNetwork = %+v", cfg.podNetwork)
				}
			},
		},
		{
			name:  "the harness's flags",
			extra: []string{"--pod-network=bridge", "--cni-conf-dir=/run/x/cni/net.d", "--pod-network-bridge=na-cni0", "--cluster-cidr=10.244.0.0/16"},
			check: func(t *testing.T, cfg *agentConfig) {
				pn := cfg.podNetwork
				if pn == nil || pn.confDir != "/run/x/cni/net.d" || pn.bridge != "na-cni0" || len(pn.clusterCIDRs) != 1 || pn.clusterCIDRs[0].String() != "10.244.0.0/16" {
					t.Errorf("podNetwork = %+v", pn)
				}
			},
		},
		{
			name:  "defaults and dual-stack",
			extra: []string{"--pod-network=bridge", "--cluster-cidr=10.244.0.0/16,fd00:10:244::/56"},
			check: func(t *testing.T, cfg *agentConfig) {
				pn := cfg.podNetwork
				if pn == nil || pn.confDir != "/etc/cni/net.d" || pn.bridge != "nodeagent0" || len(pn.clusterCIDRs) != 2 {
					t.Errorf("podNetwork = %+v", pn)
				}
			},
		},
		{name: "unknown mode", extra: []string{"--pod-network=vxlan", "--cluster-cidr=10.244.0.0/16"}, wantErr: `--pod-network: "vxlan" is not supported`},
		{name: "no cluster CIDR", extra: []string{"--pod-network=bridge"}, wantErr: "--cluster-cidr is required"},
		{name: "bad cluster CIDR", extra: []string{"--pod-network=bridge", "--cluster-cidr=10.244.0.0"}, wantErr: "--cluster-cidr"},
		{name: "two IPv4 cluster CIDRs", extra: []string{"--pod-network=bridge", "--cluster-cidr=10.244.0.0/16,10.245.0.0/16"}, wantErr: "one IPv4 and one IPv6"},
		{name: "relative conf dir", extra: []string{"--pod-network=bridge", "--cluster-cidr=10.244.0.0/16", "--cni-conf-dir=net.d"}, wantErr: "--cni-conf-dir"},
		{name: "bridge name too long", extra: []string{"--pod-network=bridge", "--cluster-cidr=10.244.0.0/16", "--pod-network-bridge=a-very-long-bridge"}, wantErr: "--pod-network-bridge"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFlags(newKlogFlags())
			if _, err := f.parse(append(baseArgs(t), tt.extra...)); err != nil {
				t.Fatal(err)
			}
			cfg, _, err := buildConfig(f)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, cfg)
		})
	}
}

// With the setting off, the pod network is left alone unless an earlier run
// recorded one under the root dir: most users never turn it on, and their
// agents must not so much as call iptables.
func TestPodNetworkOffTouchesNothingWithoutARecord(t *testing.T) {
	root := t.TempDir()
	cfg := &agentConfig{rootDir: root}
	run, err := newPodNetwork(t.Context(), cfg, nil)
	if err != nil || run != nil {
		t.Fatalf("newPodNetwork = %v, %v; want nothing to run", run != nil, err)
	}
	if err := os.WriteFile(filepath.Join(root, podnet.StateFileName), []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if run, err = newPodNetwork(t.Context(), cfg, nil); err != nil || run == nil {
		t.Fatalf("with a record: newPodNetwork = %v, %v; want its removal", run != nil, err)
	}
}
