package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/test/harness"
)

// The -pvc variant: every bench pod mounts a claim of its own, made just before it, of the
// hostpath CSI driver's StorageClass. The claim is bound when the scheduler picks the node
// (WaitForFirstConsumer), external-provisioner creates the volume, the attach/detach
// controller and external-attacher attach it, and the agent waits for the attachment,
// stages and publishes the volume before it creates the pod's sandbox.

// benchClaim is the claim of bench pod i, named as the pod.
func benchClaim(i int) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: benchPod(i, "", false).Name, Namespace: benchNamespace},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(harness.CSIHostpathStorageClass),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse("1Mi"),
			}},
		},
	}
}

// withClaim mounts the claim named as the pod at /data in its container.
func withClaim(pod *corev1.Pod) *corev1.Pod {
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pod.Name},
	}})
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "data", MountPath: "/data"})
	return pod
}

// attachTracker records when a watch first saw each VolumeAttachment attached, by the
// name of its PersistentVolume.
type attachTracker struct {
	mu          sync.Mutex
	attached    map[string]time.Time
	established chan struct{} // closed once the first watch is established
	once        sync.Once
}

func newAttachTracker() *attachTracker {
	return &attachTracker{attached: map[string]time.Time{}, established: make(chan struct{})}
}

func (at *attachTracker) observe(va *storagev1.VolumeAttachment, now time.Time) {
	pv := va.Spec.Source.PersistentVolumeName
	if pv == nil || !va.Status.Attached {
		return
	}
	at.mu.Lock()
	defer at.mu.Unlock()
	if _, ok := at.attached[*pv]; !ok {
		at.attached[*pv] = now
	}
}

func (at *attachTracker) attachedAt(pv string) time.Time {
	at.mu.Lock()
	defer at.mu.Unlock()
	return at.attached[pv]
}

// follow watches the VolumeAttachments until ctx ends.
func (at *attachTracker) follow(ctx context.Context, cs kubernetes.Interface) error {
	vas := cs.StorageV1().VolumeAttachments()
	l := lister{
		list: func(ctx context.Context, opts metav1.ListOptions) ([]any, string, error) {
			list, err := vas.List(ctx, opts)
			if err != nil {
				return nil, "", err
			}
			return pointers(list.Items), list.ResourceVersion, nil
		},
		watch: vas.Watch,
	}
	return follow(ctx, l, func(obj any, now time.Time) {
		if va, ok := obj.(*storagev1.VolumeAttachment); ok {
			at.observe(va, now)
		}
	}, func() { at.once.Do(func() { close(at.established) }) })
}

// claimVolumes returns the PersistentVolume bound to each claim of the bench namespace, by
// claim name.
func claimVolumes(ctx context.Context, cs kubernetes.Interface) (map[string]string, error) {
	pvs, err := cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, pv := range pvs.Items {
		if ref := pv.Spec.ClaimRef; ref != nil && ref.Namespace == benchNamespace {
			out[ref.Name] = pv.Name
		}
	}
	return out, nil
}

// csiMountsLeft counts the mounts the agent made for CSI volumes under its root dir: pods'
// published volumes (pods/<uid>/volumes/kubernetes.io~csi/...) and staged ones
// (plugins/kubernetes.io/csi/...). The kubelet and nodeagent lay them out alike.
func csiMountsLeft(rootDir string) (int, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return countCSIMounts(f, rootDir)
}

// countCSIMounts counts csiMountsLeft's mounts in a mountinfo table.
func countCSIMounts(mountinfo io.Reader, rootDir string) (int, error) {
	pods := filepath.Join(rootDir, "pods") + "/"
	staging := filepath.Join(rootDir, "plugins", "kubernetes.io", "csi") + "/"
	n := 0
	sc := bufio.NewScanner(mountinfo)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := fields[4] // octal escapes do not matter: the paths looked for have no spaces
		if (strings.HasPrefix(mp, pods) && strings.Contains(mp, "/volumes/kubernetes.io~csi/")) || strings.HasPrefix(mp, staging) {
			n++
		}
	}
	return n, sc.Err()
}

// volumesLeft describes what is left of the bench's volumes in the apiserver: bound
// PersistentVolumes of the bench namespace's claims and VolumeAttachments of the given
// volumes; "" when nothing is.
func volumesLeft(ctx context.Context, cs kubernetes.Interface, pvs map[string]bool) (string, error) {
	claims, err := cs.CoreV1().PersistentVolumeClaims(benchNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	bound, err := claimVolumes(ctx, cs)
	if err != nil {
		return "", err
	}
	vas, err := cs.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	attached := 0
	for _, va := range vas.Items {
		if pv := va.Spec.Source.PersistentVolumeName; pv != nil && pvs[*pv] {
			attached++
		}
	}
	if len(claims.Items)+len(bound)+attached == 0 {
		return "", nil
	}
	return fmt.Sprintf("%d claims, %d volumes and %d VolumeAttachments", len(claims.Items), len(bound), attached), nil
}
