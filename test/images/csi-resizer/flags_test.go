package main

import (
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		name        string
		args        []string
		check       func(t *testing.T, o options)
		wantErr     string
		wantIgnored []string
	}{
		{
			// csi-mock-driver-resizer.yaml, with the feature gate e2e adds when the mock
			// driver's node expansion is on.
			name: "the CSI Mock manifest",
			args: []string{"--v=5", "--csi-address=/csi/csi.sock", "--feature-gates=AnnotateFsResize=true"},
			check: func(t *testing.T, o options) {
				if o.csiAddress != "/csi/csi.sock" || !o.gates.AnnotateFsResize || !o.gates.RecoverVolumeExpansionFailure {
					t.Errorf("options = %+v", o)
				}
				if o.timeout != 10*time.Second || o.workers != 10 || !o.handleVolumeInUse || o.leaderElection {
					t.Errorf("defaults = %+v", o)
				}
			},
		},
		{
			name: "upstream's deployment, one dash",
			args: []string{"-csi-address=/run/csi/socket", "-leader-election", "-leader-election-namespace=kube-system", "-timeout=2m",
				"-workers=3", "-handle-volume-inuse-error=false", "-http-endpoint=:8080", "-leader-election-labels=a:b,c:d",
				"-retry-interval-start=2s", "-retry-interval-max=1m", "-kube-api-qps=20", "-kube-api-burst=40", "-resync-period=1m"},
			check: func(t *testing.T, o options) {
				if !o.leaderElection || o.leaderElectionNamespace != "kube-system" || o.timeout != 2*time.Minute || o.workers != 3 ||
					o.handleVolumeInUse || o.httpEndpoint != ":8080" || o.retryIntervalStart != 2*time.Second || o.retryIntervalMax != time.Minute ||
					o.kubeAPIQPS != 20 || o.kubeAPIBurst != 40 || o.resyncPeriod != time.Minute {
					t.Errorf("options = %+v", o)
				}
				if want := map[string]string{"a": "b", "c": "d"}; !maps.Equal(o.leaderElectionLabels, want) {
					t.Errorf("labels = %v, want %v", o.leaderElectionLabels, want)
				}
			},
		},
		{
			name: "accepted, ignored",
			args: []string{"--metrics-address=:9090", "--metrics-path=/m", "--extra-modify-metadata", "--automaxprocs",
				"--feature-gates=VolumeAttributesClass=true,ReleaseLeaderElectionOnExit=true", "--feature-gates=APIListChunking=true",
				"--logging-format=json", "--log-flush-frequency=1s", "--vmodule=x=1"},
			check: func(t *testing.T, o options) {
				if o.httpEndpoint != ":9090" || !o.gates.ReleaseLeaderElectionOnExit {
					t.Errorf("options = %+v", o)
				}
			},
			wantIgnored: []string{"--metrics-address", "--metrics-path", "--extra-modify-metadata", "--feature-gates=VolumeAttributesClass",
				"--feature-gates=APIListChunking", "--automaxprocs", "--logging-format=json"},
		},
		{name: "recovery off", args: []string{"--feature-gates=RecoverVolumeExpansionFailure=false"}, wantErr: "RecoverVolumeExpansionFailure=false"},
		{name: "bad gate value", args: []string{"--feature-gates=AnnotateFsResize=maybe"}, wantErr: "AnnotateFsResize"},
		{name: "both endpoints", args: []string{"--metrics-address=:1", "--http-endpoint=:2"}, wantErr: "only one of"},
		{name: "unknown flag", args: []string{"--no-such-flag"}, wantErr: "no-such-flag"},
		{name: "stray argument", args: []string{"extra"}, wantErr: "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags(tc.args, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one about %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.check != nil {
				tc.check(t, o)
			}
			for _, want := range tc.wantIgnored {
				if !slices.ContainsFunc(o.ignored, func(s string) bool { return strings.HasPrefix(s, want) }) {
					t.Errorf("ignored = %q, want an entry for %s", o.ignored, want)
				}
			}
			if len(o.ignored) != len(tc.wantIgnored) {
				t.Errorf("ignored = %q, want %d entries", o.ignored, len(tc.wantIgnored))
			}
		})
	}
}

func TestLeaseName(t *testing.T) {
	for in, want := range map[string]string{
		"hostpath.csi.k8s.io":  "external-resizer-hostpath-csi-k8s-io",
		"csi-mock-csi-mock-77": "external-resizer-csi-mock-csi-mock-77",
		"odd_name.":            "external-resizer-odd-name-X",
	} {
		if got := leaseName(in); got != want {
			t.Errorf("leaseName(%q) = %q, want %q", in, got, want)
		}
	}
}
