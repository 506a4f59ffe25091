package main

import (
	"testing"

	"github.com/nodeagent/nodeagent/test/images/csi-mock/mock"
)

// TestParseManifestArgs: the command lines of the pinned release's manifests
// (test/e2e/testing-manifests/storage-csi/mock), with what e2e.test appends
// (drivers/csi.go: the driver's name last, so that it wins), parse as the hostpath
// plugin's would.
func TestParseManifestArgs(t *testing.T) {
	driver := []string{"--drivername=mock.storage.k8s.io", "--nodeid=node-1", "--endpoint=/csi/csi.sock", "--statedir=/tmp/csi-hotpath-data", "-v=5"}
	tests := []struct {
		name      string
		args      []string
		want      mock.Config
		wantProxy string
	}{
		{
			name: "csi-mock-driver.yaml, attach and a limit",
			args: append(driver[:len(driver):len(driver)], "--drivername=csi-mock-e2e-1", "--enable-attach", "--attach-limit", "2"),
			want: mock.Config{DriverName: "csi-mock-e2e-1", NodeID: "node-1", EnableAttach: true, AttachLimit: 2, EnableTopology: true,
				ControllerExpansion: true, NodeExpansion: true, MaxVolumeSize: mock.DefaultMaxVolumeSize},
		},
		{
			name: "csi-mock-driver.yaml, topology and node expansion",
			args: append(driver[:len(driver):len(driver)], "--drivername=csi-mock-e2e-2", "--enable-topology", "--node-expand-required=true"),
			want: mock.Config{DriverName: "csi-mock-e2e-2", NodeID: "node-1", EnableTopology: true,
				ControllerExpansion: true, NodeExpansion: true, MaxVolumeSize: mock.DefaultMaxVolumeSize},
		},
		{
			name: "expansion off",
			args: append(driver[:len(driver):len(driver)], "--enable-volume-expansion=false", "--enable-topology=false", "--maxvolumespernode=3"),
			want: mock.Config{DriverName: "mock.storage.k8s.io", NodeID: "node-1", AttachLimit: 3, MaxVolumeSize: mock.DefaultMaxVolumeSize},
		},
		{
			name:      "csi-mock-proxy.yaml",
			args:      []string{"-v=5", "-nodeid=node-1", "-endpoint=/csi/csi.sock", "-proxy-endpoint=tcp://:9000"},
			want:      mock.Config{DriverName: mock.DefaultDriverName, NodeID: "node-1", EnableTopology: true, ControllerExpansion: true, NodeExpansion: true, MaxVolumeSize: mock.DefaultMaxVolumeSize},
			wantProxy: "tcp://:9000",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parse(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if o.driver != tt.want || o.proxyEndpoint != tt.wantProxy || o.endpoint != "/csi/csi.sock" {
				t.Errorf("parsed %+v, proxy %q, endpoint %q; want %+v, proxy %q", o.driver, o.proxyEndpoint, o.endpoint, tt.want, tt.wantProxy)
			}
		})
	}
	if _, err := parse([]string{"--no-such-flag"}); err == nil {
		t.Error("an unknown flag was taken")
	}
}
