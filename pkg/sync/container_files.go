package sync

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodeagent/nodeagent/pkg/poddir"
	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// The modes of the files the agent keeps for a pod's containers in its
// pod directory.
const (
	etcHostsMode           = 0o644
	terminationMessageMode = 0o666
)

// sandboxIPs returns the addresses of the pod's sandbox sandboxID: as
// the last relist saw it, or read from the runtime when it is new. A
// host-network pod has the node's.
func (w *Worker) sandboxIPs(ctx context.Context, pod *v1.Pod, observed *runtime.PodStatus, sandboxID string) []string {
	if pod.Spec.HostNetwork {
		return w.settings.nodeIPs
	}
	if sb := observed.LatestSandbox(); sb != nil && sb.ID == sandboxID && len(sb.IPs) > 0 {
		return sb.IPs
	}
	resp, err := w.deps.runtime.PodSandboxStatus(ctx, sandboxID, false)
	if err != nil {
		klog.FromContext(ctx).Info("Reading the sandbox's addresses failed", "sandboxID", sandboxID, "err", err.Error())
		return nil
	}
	return runtime.SandboxIPs(resp.GetStatus())
}

// etcHostsMount writes the pod's hosts file and binds it at /etc/hosts,
// unless the container mounts its own there or the pod has no address
// yet. The file is rewritten for every container, so that it follows
// the pod's current sandbox.
func (p *pass) etcHostsMount(c *v1.Container) ([]*runtimeapi.Mount, error) {
	w, pod := p.w, p.pod
	if len(p.podIPs) == 0 || runtime.MountsEtcHosts(c) {
		return nil, nil
	}
	var node []byte
	if pod.Spec.HostNetwork {
		var err error
		if node, err = os.ReadFile(w.settings.hostsFile); err != nil {
			return nil, fmt.Errorf("read the node's hosts file: %w", err)
		}
	}
	content, err := runtime.HostsFile(pod, p.podIPs, w.settings.podOptions.DNS.ClusterDomain, node)
	if err != nil {
		return nil, err
	}
	path := w.podDir(pod).EtcHosts()
	if err := os.WriteFile(path, content, etcHostsMode); err != nil {
		return nil, fmt.Errorf("write the pod's hosts file: %w", err)
	}
	// WriteFile's mode is masked by the umask; every user of the
	// container must be able to read the file.
	if err := os.Chmod(path, etcHostsMode); err != nil {
		return nil, fmt.Errorf("write the pod's hosts file: %w", err)
	}
	return []*runtimeapi.Mount{{ContainerPath: runtime.EtcHostsPath, HostPath: path}}, nil
}

// terminationMessageMount creates a fresh, empty file for this start of
// the container and binds it at its terminationMessagePath; what the
// container leaves there becomes its termination message. As for the
// kubelet, a file that cannot be made leaves the container without one
// rather than unstarted.
func (w *Worker) terminationMessageMount(ctx context.Context, pod *v1.Pod, c *v1.Container) []*runtimeapi.Mount {
	if c.TerminationMessagePath == "" {
		return nil
	}
	dir := w.podDir(pod).ContainerDir(c.Name)
	path := filepath.Join(dir, fmt.Sprintf("%08x", rand.Uint32()))
	err := os.MkdirAll(dir, poddir.DirMode)
	if err == nil {
		var f *os.File
		if f, err = os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, terminationMessageMode); err == nil {
			_ = f.Close()
			err = os.Chmod(path, terminationMessageMode)
		}
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Creating the termination message file failed", "container", c.Name)
		return nil
	}
	return []*runtimeapi.Mount{{ContainerPath: c.TerminationMessagePath, HostPath: path}}
}
