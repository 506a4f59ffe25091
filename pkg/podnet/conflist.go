package podnet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sort"

	"github.com/containernetworking/cni/libcni"
	cnitypes "github.com/containernetworking/cni/pkg/types"
)

const (
	// NetworkName is the CNI network nodeagent writes; it marks the
	// configuration file as the agent's own.
	NetworkName = "nodeagent"
	// ConflistName is the file written in the CNI configuration directory.
	// "10-" sorts it ahead of the usual DaemonSet files, so a runtime that
	// loads the first file in the directory picks it.
	ConflistName = "10-nodeagent.conflist"
	// cniVersion is the spec version of the list. 1.0.0 is understood by
	// the plugins and runtimes of the last years (containerd 1.6 on).
	cniVersion = "1.0.0"
)

// conflist is a CNI network configuration list: cnitypes.NetConfList with
// plugins that carry their own settings beside the common ones.
type conflist struct {
	CNIVersion string   `json:"cniVersion"`
	Name       string   `json:"name"`
	Plugins    []plugin `json:"plugins"`
}

// plugin is one entry of a list: the fields every plugin has, in the CNI
// library's type, plus the settings of its type.
type plugin struct {
	common   cnitypes.PluginConf
	settings any
}

// MarshalJSON writes the common fields and the plugin's own settings as one
// object, "type" first. cnitypes.PluginConf has its own MarshalJSON (it
// drops an empty "dns"); embedding it would let that method stand for the
// whole struct and lose the plugin's settings, hence the explicit merge.
func (p plugin) MarshalJSON() ([]byte, error) {
	fields := map[string]json.RawMessage{}
	for _, part := range []any{&p.common, p.settings} {
		b, err := json.Marshal(part)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, &fields); err != nil {
			return nil, err
		}
	}
	if string(fields["ipam"]) == "{}" {
		delete(fields, "ipam") // omitempty does not omit an empty struct
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		if k != "type" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	keys = append([]string{"type"}, keys...)
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		name, _ := json.Marshal(k)
		buf.Write(name)
		buf.WriteByte(':')
		buf.Write(fields[k])
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// bridgeSettings are the bridge plugin's settings that nodeagent sets.
type bridgeSettings struct {
	Bridge      string        `json:"bridge"`
	IsGateway   bool          `json:"isGateway"`
	IPMasq      bool          `json:"ipMasq"`
	HairpinMode bool          `json:"hairpinMode"`
	IPAM        hostLocalIPAM `json:"ipam"`
}

// hostLocalIPAM is the host-local IPAM plugin's configuration: one range
// set per pod CIDR, so a dual-stack node gives each pod one address of
// each family.
type hostLocalIPAM struct {
	cnitypes.IPAM
	Ranges  [][]ipRange       `json:"ranges"`
	Routes  []*cnitypes.Route `json:"routes"`
	DataDir string            `json:"dataDir,omitempty"`
}

type ipRange struct {
	Subnet cnitypes.IPNet `json:"subnet"`
}

// ConflistConfig is what the network configuration is made of.
type ConflistConfig struct {
	// Bridge is the bridge device the pods' veths are attached to.
	Bridge string
	// PodCIDRs are the Node's spec.podCIDRs, at most one per family.
	PodCIDRs []*net.IPNet
	// IPAMDataDir is where host-local keeps its allocations; empty means
	// the plugin's default.
	IPAMDataDir string
}

// Conflist returns the CNI configuration list for the node: a bridge
// acting as the pods' gateway with host-local addresses from the pod
// CIDRs, and portmap for hostPorts. The bridge does not masquerade: the
// agent masquerades only traffic leaving the cluster CIDR, so that pods
// reach pods on other nodes with their own addresses. The result is
// checked by parsing it back with libcni, as a runtime would.
func Conflist(c ConflistConfig) ([]byte, error) {
	if c.Bridge == "" {
		return nil, errors.New("conflist: no bridge name")
	}
	if len(c.PodCIDRs) == 0 {
		return nil, errors.New("conflist: no pod CIDR")
	}
	ipam := hostLocalIPAM{IPAM: cnitypes.IPAM{Type: "host-local"}, DataDir: c.IPAMDataDir}
	for _, cidr := range c.PodCIDRs {
		ipam.Ranges = append(ipam.Ranges, []ipRange{{Subnet: cnitypes.IPNet(*cidr)}})
		dst := net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
		if cidr.IP.To4() == nil {
			dst = net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
		}
		ipam.Routes = append(ipam.Routes, &cnitypes.Route{Dst: dst})
	}
	list := conflist{
		CNIVersion: cniVersion,
		Name:       NetworkName,
		Plugins: []plugin{
			{
				common:   cnitypes.PluginConf{Type: "bridge"},
				settings: bridgeSettings{Bridge: c.Bridge, IsGateway: true, IPMasq: false, HairpinMode: true, IPAM: ipam},
			},
			{
				common:   cnitypes.PluginConf{Type: "portmap", Capabilities: map[string]bool{"portMappings": true}},
				settings: struct{}{},
			},
		},
	}
	b, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("conflist: %w", err)
	}
	if _, err := libcni.ConfListFromBytes(b); err != nil {
		return nil, fmt.Errorf("conflist: libcni does not read it back: %w", err)
	}
	return append(b, '\n'), nil
}

// isOurConflist reports whether b is a configuration list of the agent's
// network, so that teardown never removes a file someone else put there.
func isOurConflist(b []byte) bool {
	list, err := libcni.ConfListFromBytes(b)
	return err == nil && list.Name == NetworkName
}
