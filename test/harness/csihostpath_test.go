package harness

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestRewriteStockPaths(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{name: "root dir", in: "path: /var/lib/kubelet/plugins_registry", want: "path: /run/agent/root/plugins_registry"},
		{name: "argument", in: "--kubelet-registration-path=/var/lib/kubelet/plugins/d/csi.sock", want: "--kubelet-registration-path=/run/agent/root/plugins/d/csi.sock"},
		{name: "data dir", in: "path: /var/lib/csi-hostpath-data", want: "path: /run/csi-hostpath-data"},
		{name: "other paths stay", in: "path: /var/lib/kubeletx /dev", want: "path: /var/lib/kubeletx /dev"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(rewriteStockPaths([]byte(tt.in), "/run/agent/root", "/run/csi-hostpath-data")); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// The manifests of deploy/csi-hostpath decode, name what the harness waits for, and keep
// nothing of the node outside the run dir but /dev.
func TestCSIHostpathManifests(t *testing.T) {
	cfg := &Config{RepoDir: "../..", RunDir: "/var/lib/nodeagent-test"}
	objs, err := cfg.csiHostpathObjects()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		switch o.GetKind() {
		case "CSIDriver":
			var d storagev1.CSIDriver
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
				t.Fatal(err)
			}
			if d.Name != CSIHostpathDriver || d.Spec.AttachRequired == nil || !*d.Spec.AttachRequired {
				t.Errorf("CSIDriver %s attachRequired %v, want %s with attachRequired", d.Name, d.Spec.AttachRequired, CSIHostpathDriver)
			}
		case "StorageClass":
			var sc storagev1.StorageClass
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &sc); err != nil {
				t.Fatal(err)
			}
			if sc.Name != CSIHostpathStorageClass || sc.Provisioner != CSIHostpathDriver || sc.Annotations["storageclass.kubernetes.io/is-default-class"] != "true" {
				t.Errorf("StorageClass %s of %s, annotations %v", sc.Name, sc.Provisioner, sc.Annotations)
			}
		case "StatefulSet":
			var ss appsv1.StatefulSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ss); err != nil {
				t.Fatal(err)
			}
			if ss.Namespace != CSIHostpathNamespace || ss.Name+"-0" != csiHostpathPod {
				t.Errorf("StatefulSet %s/%s, want the pod %s/%s", ss.Namespace, ss.Name, CSIHostpathNamespace, csiHostpathPod)
			}
			for _, v := range ss.Spec.Template.Spec.Volumes {
				if hp := v.HostPath; hp != nil && hp.Path != "/dev" && !strings.HasPrefix(hp.Path, cfg.RunDir+"/") {
					t.Errorf("hostPath %s outside the run dir", hp.Path)
				}
			}
			for _, ctr := range ss.Spec.Template.Spec.Containers {
				for _, a := range ctr.Args {
					if strings.Contains(a, "/var/lib/kubelet") {
						t.Errorf("container %s: argument %s not rewritten", ctr.Name, a)
					}
				}
			}
		}
	}
	for _, k := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "CSIDriver", "StorageClass", "StatefulSet"} {
		if kinds[k] == 0 {
			t.Errorf("no %s in the manifests (kinds %v)", k, kinds)
		}
	}
}
