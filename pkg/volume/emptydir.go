package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

const emptyDirPluginName = "kubernetes.io/empty-dir"

// emptyDirPlugin gives the pod a fresh directory: on the node's disk, on a
// tmpfs (medium Memory) or on hugetlbfs (medium HugePages).
type emptyDirPlugin struct {
	mounter mounter
	// allocatableMemory bounds a tmpfs when nothing smaller is set.
	allocatableMemory func() *resource.Quantity
	// hugePagesDir is /sys/kernel/mm/hugepages; its absence means the
	// host has no huge pages.
	hugePagesDir string
}

var _ plugin = (*emptyDirPlugin)(nil)

func (p *emptyDirPlugin) name() string { return emptyDirPluginName }

func (p *emptyDirPlugin) canSupport(vol *v1.Volume) bool { return vol.EmptyDir != nil }

func (p *emptyDirPlugin) setUp(_ context.Context, req *setUpRequest) (Mount, error) {
	medium := req.vol.EmptyDir.Medium
	mnt := Mount{HostPath: req.dir, Managed: true, Plugin: p.name()}
	if medium != v1.StorageMediumDefault && medium != v1.StorageMediumMemory &&
		medium != v1.StorageMediumHugePages && !strings.HasPrefix(string(medium), string(v1.StorageMediumHugePagesPrefix)) {
		return Mount{}, fmt.Errorf("emptyDir medium %q is not supported", medium)
	}
	// Only a fresh volume gets its mode and ownership set: on later syncs
	// the files are the pod's, and walking them every time would be slow
	// and would undo the pod's own chmods.
	mounted, err := p.isSetUp(req.dir, medium)
	if err != nil {
		return Mount{}, err
	}
	if mounted {
		return mnt, nil
	}
	if err := os.MkdirAll(req.dir, 0o750); err != nil {
		return Mount{}, fmt.Errorf("create emptyDir: %w", err)
	}
	switch medium {
	case v1.StorageMediumDefault:
	case v1.StorageMediumMemory:
		size := emptyDirMemorySize(p.allocatableMemory(), req.pod, req.vol.EmptyDir.SizeLimit)
		if err := ensureTmpfs(p.mounter, req.dir, size, 0); err != nil {
			return Mount{}, err
		}
	default:
		if err := p.ensureHugePages(req.dir, medium, req.pod); err != nil {
			return Mount{}, err
		}
	}
	// The directory is world-writable like the kubelet's, so that any
	// container user can use it. Only its permission bits are set, and
	// only when they differ: a tmpfs root comes sticky (1777), and keeps
	// that, as on a kubelet node.
	if fi, err := os.Stat(req.dir); err != nil {
		return Mount{}, fmt.Errorf("emptyDir: %w", err)
	} else if fi.Mode().Perm() != 0o777 {
		if err := os.Chmod(req.dir, fi.Mode()&(os.ModeSetgid|os.ModeSetuid|os.ModeSticky)|0o777); err != nil {
			return Mount{}, fmt.Errorf("chmod emptyDir: %w", err)
		}
	}
	if err := planFSGroup(req.fsGroup, req.fsGroupPolicy, false).apply(req.dir); err != nil {
		return Mount{}, fmt.Errorf("apply fsGroup: %w", err)
	}
	return mnt, nil
}

// isSetUp reports whether the volume is already in place: the directory
// exists and, for a memory or huge page medium, is a mount point.
func (p *emptyDirPlugin) isSetUp(dir string, medium v1.StorageMedium) (bool, error) {
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("emptyDir: %w", err)
	}
	if !fi.IsDir() {
		return false, fmt.Errorf("emptyDir %s is not a directory", dir)
	}
	if medium == v1.StorageMediumDefault {
		return true, nil
	}
	mps, err := p.mounter.mountPoints(dir)
	if err != nil {
		return false, err
	}
	_, ok := findMount(mps, dir)
	return ok, nil
}

func (p *emptyDirPlugin) tearDown(_ context.Context, dir string) error {
	return removeDir(p.mounter, dir)
}

// ensureTmpfs mounts a tmpfs at dir unless one already is: a second sync or
// an agent restart must not hide the files on the existing one.
func ensureTmpfs(m mounter, dir string, size *resource.Quantity, flags uintptr) error {
	fstype, mounted, err := m.mountedAt(dir)
	if err != nil {
		return err
	}
	if mounted {
		if fstype != "tmpfs" {
			return fmt.Errorf("%s is already mounted as %s, expected tmpfs", dir, fstype)
		}
		return nil
	}
	data := ""
	if size != nil && size.Sign() > 0 {
		data = fmt.Sprintf("size=%d", size.Value())
	}
	return m.mount("tmpfs", dir, "tmpfs", flags, data)
}

// emptyDirMemorySize is the smallest positive of: node allocatable memory,
// the pod's memory limit, the volume's sizeLimit. nil means no size option
// (the kernel's default, half of RAM).
func emptyDirMemorySize(allocatable *resource.Quantity, pod *v1.Pod, sizeLimit *resource.Quantity) *resource.Quantity {
	var size *resource.Quantity
	smaller := func(q *resource.Quantity) {
		if q != nil && q.Sign() > 0 && (size == nil || q.Cmp(*size) < 0) {
			size = q
		}
	}
	smaller(allocatable)
	smaller(podMemoryLimit(pod))
	smaller(sizeLimit)
	return size
}

// podMemoryLimit is the pod's memory limit as its cgroup gets it: the
// pod-level limit if set, else the larger of the sum over long-running
// containers and the largest init container, and nil if any container has
// no limit.
func podMemoryLimit(pod *v1.Pod) *resource.Quantity {
	if pod.Spec.Resources != nil {
		if q, ok := pod.Spec.Resources.Limits[v1.ResourceMemory]; ok {
			return &q
		}
	}
	sum := resource.Quantity{}
	maxInit := resource.Quantity{}
	for _, c := range pod.Spec.InitContainers {
		q, ok := c.Resources.Limits[v1.ResourceMemory]
		if !ok {
			return nil
		}
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			sum.Add(q)
			continue
		}
		if q.Cmp(maxInit) > 0 {
			maxInit = q
		}
	}
	for _, c := range pod.Spec.Containers {
		q, ok := c.Resources.Limits[v1.ResourceMemory]
		if !ok {
			return nil
		}
		sum.Add(q)
	}
	if maxInit.Cmp(sum) > 0 {
		sum = maxInit
	}
	return &sum
}

func (p *emptyDirPlugin) ensureHugePages(dir string, medium v1.StorageMedium, pod *v1.Pod) error {
	entries, err := os.ReadDir(p.hugePagesDir)
	if err != nil || len(entries) == 0 {
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("emptyDir medium %s: read %s: %w", medium, p.hugePagesDir, err)
		}
		return fmt.Errorf("emptyDir medium %s: the node has no huge pages", medium)
	}
	pageSize, err := hugePageSize(medium, pod)
	if err != nil {
		return err
	}
	mps, err := p.mounter.mountPoints(dir)
	if err != nil {
		return err
	}
	if mp, ok := findMount(mps, dir); ok {
		if mp.fstype != "hugetlbfs" {
			return fmt.Errorf("%s is already mounted as %s, expected hugetlbfs", dir, mp.fstype)
		}
		return nil
	}
	return p.mounter.mount("nodev", dir, "hugetlbfs", unix.MS_NODEV|unix.MS_NOSUID, "pagesize="+pageSize.String())
}

// hugePageSize picks the page size: the medium's own (HugePages-2Mi), or
// the one size the pod's containers request huge pages of.
func hugePageSize(medium v1.StorageMedium, pod *v1.Pod) (resource.Quantity, error) {
	var want *resource.Quantity
	if medium != v1.StorageMediumHugePages {
		q, err := resource.ParseQuantity(strings.TrimPrefix(string(medium), string(v1.StorageMediumHugePagesPrefix)))
		if err != nil {
			return resource.Quantity{}, fmt.Errorf("emptyDir medium %s: invalid page size: %w", medium, err)
		}
		want = &q
	}
	var found *resource.Quantity
	var lists []v1.ResourceList
	if pod.Spec.Resources != nil {
		lists = append(lists, pod.Spec.Resources.Requests)
	}
	for _, c := range append(append([]v1.Container{}, pod.Spec.Containers...), pod.Spec.InitContainers...) {
		lists = append(lists, c.Resources.Requests)
	}
	for _, rl := range lists {
		for name := range rl {
			s, ok := strings.CutPrefix(string(name), string(v1.ResourceHugePagesPrefix))
			if !ok {
				continue
			}
			q, err := resource.ParseQuantity(s)
			if err != nil {
				return resource.Quantity{}, fmt.Errorf("invalid huge page resource %s: %w", name, err)
			}
			switch {
			case want != nil:
				if q.Cmp(*want) == 0 {
					found = want
				}
			case found != nil && found.Cmp(q) != 0:
				return resource.Quantity{}, fmt.Errorf("medium: %s can't be used if container requests multiple huge page sizes", medium)
			default:
				found = &q
			}
		}
	}
	if found == nil {
		return resource.Quantity{}, fmt.Errorf("medium %s: hugePages storage requested, but there is no resource request for huge pages", medium)
	}
	return *found, nil
}
