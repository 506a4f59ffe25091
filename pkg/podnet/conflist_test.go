package podnet

import (
	"encoding/json"
	"net"
	"reflect"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

func mustCIDRs(t *testing.T, s ...string) []*net.IPNet {
	t.Helper()
	out, err := ParsePodCIDRs(s)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestConflist(t *testing.T) {
	tests := []struct {
		name       string
		podCIDRs   []string
		wantRanges [][]map[string]string
		wantRoutes []map[string]string
	}{
		{
			name:       "IPv4",
			podCIDRs:   []string{"10.244.1.0/24"},
			wantRanges: [][]map[string]string{{{"subnet": "10.244.1.0/24"}}},
			wantRoutes: []map[string]string{{"dst": "0.0.0.0/0"}},
		},
		{
			name:       "dual-stack",
			podCIDRs:   []string{"10.244.1.0/24", "fd00:10:244:1::/64"},
			wantRanges: [][]map[string]string{{{"subnet": "10.244.1.0/24"}}, {{"subnet": "fd00:10:244:1::/64"}}},
			wantRoutes: []map[string]string{{"dst": "0.0.0.0/0"}, {"dst": "::/0"}},
		},
		{
			name:       "IPv6 only",
			podCIDRs:   []string{"fd00:10:244:1::/64"},
			wantRanges: [][]map[string]string{{{"subnet": "fd00:10:244:1::/64"}}},
			wantRoutes: []map[string]string{{"dst": "::/0"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Conflist(ConflistConfig{Bridge: "na-cni0", PodCIDRs: mustCIDRs(t, tt.podCIDRs...), IPAMDataDir: "/var/lib/x/ipam"})
			if err != nil {
				t.Fatal(err)
			}
			list, err := libcni.ConfListFromBytes(b)
			if err != nil {
				t.Fatalf("libcni: %v\n%s", err, b)
			}
			if list.Name != NetworkName || list.CNIVersion != "1.0.0" || len(list.Plugins) != 2 {
				t.Fatalf("list = %s %s with %d plugins", list.Name, list.CNIVersion, len(list.Plugins))
			}
			if !isOurConflist(b) {
				t.Error("isOurConflist = false for the agent's own list")
			}
			br, pm := list.Plugins[0], list.Plugins[1]
			if br.Network.Type != "bridge" || br.Network.IPAM.Type != "host-local" {
				t.Errorf("first plugin %+v", br.Network)
			}
			if pm.Network.Type != "portmap" || !pm.Network.Capabilities["portMappings"] {
				t.Errorf("second plugin %+v", pm.Network)
			}
			var bridge struct {
				Bridge      string `json:"bridge"`
				IsGateway   *bool  `json:"isGateway"`
				IPMasq      *bool  `json:"ipMasq"`
				HairpinMode *bool  `json:"hairpinMode"`
				IPAM        struct {
					Ranges  [][]map[string]string `json:"ranges"`
					Routes  []map[string]string   `json:"routes"`
					DataDir string                `json:"dataDir"`
				} `json:"ipam"`
			}
			if err := json.Unmarshal(br.Bytes, &bridge); err != nil {
				t.Fatal(err)
			}
			if bridge.Bridge != "na-cni0" || bridge.IsGateway == nil || !*bridge.IsGateway ||
				bridge.IPMasq == nil || *bridge.IPMasq || bridge.HairpinMode == nil || !*bridge.HairpinMode {
				t.Errorf("bridge settings %s", br.Bytes)
			}
			if !reflect.DeepEqual(bridge.IPAM.Ranges, tt.wantRanges) || !reflect.DeepEqual(bridge.IPAM.Routes, tt.wantRoutes) ||
				bridge.IPAM.DataDir != "/var/lib/x/ipam" {
				t.Errorf("ipam = %+v", bridge.IPAM)
			}
		})
	}
}

func TestConflistRefusesNothing(t *testing.T) {
	if _, err := Conflist(ConflistConfig{Bridge: "b"}); err == nil {
		t.Error("no pod CIDR: no error")
	}
	if _, err := Conflist(ConflistConfig{PodCIDRs: mustCIDRs(t, "10.0.0.0/24")}); err == nil {
		t.Error("no bridge: no error")
	}
}

func TestIsOurConflist(t *testing.T) {
	for in, want := range map[string]bool{
		`{"cniVersion":"1.0.0","name":"nodeagent","plugins":[{"type":"bridge"}]}`: true,
		`{"cniVersion":"1.0.0","name":"flannel","plugins":[{"type":"flannel"}]}`:  false,
		`not json`: false,
	} {
		if got := isOurConflist([]byte(in)); got != want {
			t.Errorf("isOurConflist(%s) = %t", in, got)
		}
	}
}

func TestParseCIDRs(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int
		bad  bool
	}{
		{in: "10.244.0.0/16", want: 1},
		{in: "10.244.0.0/16, fd00:10:244::/56", want: 2},
		{in: "", bad: true},
		{in: "10.244.0.0", bad: true},
		{in: "10.244.0.1/16", bad: true},
		{in: "10.244.0.0/16,10.245.0.0/16", bad: true},
		{in: "10.244.0.0/16,fd00::/56,10.1.0.0/16", bad: true},
	} {
		got, err := ParseClusterCIDRs(tt.in)
		if (err != nil) != tt.bad || len(got) != tt.want {
			t.Errorf("ParseClusterCIDRs(%q) = %v, %v", tt.in, got, err)
		}
	}
}
