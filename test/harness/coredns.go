package harness

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// CoreDNSVersion is the CoreDNS release the pinned kubeadm deploys (its CoreDNSVersion).
const CoreDNSVersion = "v1.14.6"

// CoreDNSImage is its image under the public name, mapped to the local registry.
var CoreDNSImage = "registry.k8s.io/" + coreDNSPath

const (
	coreDNSPath      = "coredns/coredns:" + CoreDNSVersion
	coreDNSManifests = "deploy/coredns"
	// CoreDNSDeployment is the Deployment in kube-system that serves the cluster's DNS
	// behind the kube-dns Service at ClusterDNS.
	CoreDNSDeployment = "coredns"
	// coreDNSUser is the image's user: distroless's nonroot, as upstream's image runs.
	coreDNSUser = "65532:65532"
)

// coreDNSBinary is built with the upstream build's versions of the modules both use (its
// client-go a minor newer than CoreDNS's own): modalign.go; and without the plugins of
// coreDNSLeftOut.
var coreDNSBinary = moduleBinary{name: "coredns", module: "github.com/coredns/coredns",
	version: CoreDNSVersion, pkg: ".", ldflags: "-X github.com/coredns/coredns/coremain.GitCommit=" + CoreDNSVersion,
	prepare: leaveOutCoreDNSPlugins}

// coreDNSLeftOut are the plugins the harness's CoreDNS is built without: the cloud DNS
// providers (azure, clouddns, route53: the AWS, Azure and Google SDKs), etcd, tracing,
// DNSSEC signing (dnssec, sign: AWS KMS keys), geoip, nomad and DNS over QUIC and HTTP/3.
// No Corefile the harness deploys uses them (deploy/coredns: errors, health, ready,
// kubernetes, prometheus, cache, loop, reload, loadbalance; kubeadm's adds forward), and
// on a fresh machine they were two thirds of what CoreDNS compiled after csi-provisioner
// (606 packages with them, 189 without).
var coreDNSLeftOut = []string{"azure", "clouddns", "dnssec", "etcd", "geoip", "https3", "nomad", "quic", "route53", "sign", "trace"}

// coreDNSPluginList is where CoreDNS's build imports its plugins (generated from its
// plugin.cfg).
const coreDNSPluginList = "core/plugin/zplugin.go"

// leaveOutCoreDNSPlugins removes coreDNSLeftOut's imports from the plugin list in src. A
// plugin not found there fails the build: a release that renamed or moved them must be
// looked at again.
func leaveOutCoreDNSPlugins(src string) error {
	path := filepath.Join(src, coreDNSPluginList)
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := withoutPluginImports(string(data), coreDNSLeftOut)
	if err != nil {
		return fmt.Errorf("%s: %w", coreDNSPluginList, err)
	}
	return os.WriteFile(path, []byte(out), 0o644)
}

// withoutPluginImports removes the lines `_ "github.com/coredns/coredns/plugin/<name>"`
// of each name from a plugin list; each must be there once.
func withoutPluginImports(list string, names []string) (string, error) {
	lines := strings.SplitAfter(list, "\n")
	for _, name := range names {
		imp := `_ "github.com/coredns/coredns/plugin/` + name + `"`
		i := slices.IndexFunc(lines, func(l string) bool { return strings.TrimSpace(l) == imp })
		if i < 0 {
			return "", fmt.Errorf("no import of plugin %s", name)
		}
		lines = slices.Delete(lines, i, i+1)
	}
	return strings.Join(lines, ""), nil
}

// EnsureCoreDNS builds CoreDNS from the module proxy into the cache unless a previous run
// did (about 2 minutes on 2 cores), and returns the binary's path.
func (c *Config) EnsureCoreDNS(ctx context.Context) (string, error) {
	return c.ensureModuleBinary(ctx, coreDNSBinary)
}

// coreDNSImage is the image as upstream's Dockerfile makes it: /coredns alone, with the
// file capability to bind port 53 (upstream runs setcap on it), run as nonroot. The
// Deployment adds NET_BIND_SERVICE to the container's capabilities, so the file
// capability takes effect even with no_new_privs (allowPrivilegeEscalation: false).
func (c *Config) coreDNSImage(ctx context.Context) (v1.Image, error) {
	bin, err := c.EnsureCoreDNS(ctx)
	if err != nil {
		return nil, err
	}
	l, err := cachedLayer(bin+".layer.tar.gz", func() ([]tarFile, error) {
		data, err := os.ReadFile(bin)
		if err != nil {
			return nil, err
		}
		return []tarFile{{name: "coredns", mode: 0o755, data: data,
			xattrs: map[string]string{"security.capability": string(fileCapability(capNetBindService))}}}, nil
	})
	if err != nil {
		return nil, err
	}
	// The user and group names of upstream's base image: a runtime told only the user's
	// ID (as agents tell it the image's) takes its group from /etc/passwd.
	etc, err := c.layerOf([]tarFile{
		{name: "etc", dir: true, mode: 0o755},
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n")},
	})
	if err != nil {
		return nil, err
	}
	return imageOf(v1.Config{Entrypoint: []string{"/coredns"}, Env: []string{imagePath}, User: coreDNSUser, WorkingDir: "/",
		ExposedPorts: map[string]struct{}{"53/tcp": {}, "53/udp": {}}}, etc, l)
}

// capNetBindService is CAP_NET_BIND_SERVICE's number (linux/capability.h).
const capNetBindService = 10

// fileCapability is the value of a security.capability extended attribute (struct
// vfs_cap_data, revision 2) that puts the capability cap (below 32) in the permitted set,
// with the effective flag: what `setcap cap_x=+ep` writes.
func fileCapability(cap uint) []byte {
	const revision2, effective = 0x02000000, 0x1
	b := make([]byte, 20)
	binary.LittleEndian.PutUint32(b[0:], revision2|effective)
	binary.LittleEndian.PutUint32(b[4:], 1<<cap) // permitted, low word
	return b                                     // inheritable and the high words stay 0
}

// coreDNSObjects reads deploy/coredns, in file name order.
func (c *Config) coreDNSObjects() ([]*unstructured.Unstructured, error) {
	return c.manifestObjects(coreDNSManifests, nil)
}

// deployCoreDNS applies deploy/coredns and waits until the Deployment is available: its
// pod answers its readiness probe, which needs the kubernetes plugin to have listed
// Services and EndpointSlices through the kubernetes Service, that is through kube-proxy.
func (c *Config) deployCoreDNS(ctx context.Context) error {
	objs, err := c.coreDNSObjects()
	if err != nil {
		return err
	}
	if err := c.applyObjects(ctx, objs); err != nil {
		return err
	}
	return c.WaitCoreDNS(ctx)
}

// WaitCoreDNS waits until the CoreDNS Deployment has all its replicas updated and
// available.
func (c *Config) WaitCoreDNS(ctx context.Context) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	return c.waitReady(ctx, "agent", 3*time.Minute, func(ctx context.Context) error {
		d, err := cs.AppsV1().Deployments("kube-system").Get(ctx, CoreDNSDeployment, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return deploymentAvailable(d)
	})
}

// deploymentAvailable says why d is not yet rolled out and available, or nil.
func deploymentAvailable(d *appsv1.Deployment) error {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	if st.ObservedGeneration < d.Generation || st.UpdatedReplicas < want || st.AvailableReplicas < want || st.Replicas > want {
		return fmt.Errorf("deployment %s/%s: %d of %d replicas updated, %d available (%d in all)",
			d.Namespace, d.Name, st.UpdatedReplicas, want, st.AvailableReplicas, st.Replicas)
	}
	return nil
}
