package pleg

import (
	"reflect"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeagent/nodeagent/pkg/runtime"
)

// What an entry keeps of a status must give the observed sandbox and container that
// the whole status gives, and drop the rest.
func TestKeptStatusesObserveAsTheWholeOnes(t *testing.T) {
	labels := map[string]string{runtime.LabelPodUID: "uid-1", runtime.LabelPodName: "p", runtime.LabelPodNamespace: "ns", runtime.LabelContainer: "c"}
	sb := &runtimeapi.PodSandbox{Id: "sb", Labels: labels, State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: 5, Metadata: &runtimeapi.PodSandboxMetadata{Attempt: 1}}
	sbSt := &runtimeapi.PodSandboxStatus{
		Id: "sb", Labels: labels, Annotations: map[string]string{"a": "b"},
		Network: &runtimeapi.PodSandboxNetworkStatus{Ip: "10.0.0.2", AdditionalIps: []*runtimeapi.PodIP{{Ip: "fd00::2"}}},
		Linux:   &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{Options: &runtimeapi.NamespaceOption{}}},
	}
	whole, _, _ := runtime.SandboxFromCRI(sb, sbSt)
	kept, _, _ := runtime.SandboxFromCRI(sb, keptSandbox(sbSt))
	if !reflect.DeepEqual(whole, kept) {
		t.Errorf("sandbox from the kept status %+v, from the whole %+v", kept, whole)
	}
	if k := keptSandbox(sbSt); k.Labels != nil || k.Annotations != nil || k.Linux != nil {
		t.Errorf("kept sandbox status holds more than its addresses: %v", k)
	}

	c := &runtimeapi.Container{Id: "c1", PodSandboxId: "sb", Labels: labels, State: runtimeapi.ContainerState_CONTAINER_EXITED,
		Annotations: map[string]string{runtime.AnnotationRestartCount: "2"}, Image: &runtimeapi.ImageSpec{Image: "listed"}, ImageRef: "listed-ref"}
	cSt := &runtimeapi.ContainerStatus{
		Id: "c1", State: runtimeapi.ContainerState_CONTAINER_EXITED, StartedAt: 10, FinishedAt: 20, ExitCode: 3,
		Reason: "Error", Message: "m", Image: &runtimeapi.ImageSpec{Image: "img"}, ImageRef: "ref",
		Labels: labels, Annotations: map[string]string{"x": "y"}, Mounts: []*runtimeapi.Mount{{ContainerPath: "/dev/termination-log"}},
		User: &runtimeapi.ContainerUser{Linux: &runtimeapi.LinuxContainerUser{Uid: 1, Gid: 2, SupplementalGroups: []int64{3}}},
	}
	wholeC, _, _ := runtime.ContainerFromCRI(c, cSt)
	keptC, _, _ := runtime.ContainerFromCRI(c, keptContainer(cSt))
	if !reflect.DeepEqual(wholeC, keptC) {
		t.Errorf("container from the kept status %+v, from the whole %+v", keptC, wholeC)
	}
	if k := keptContainer(cSt); k.Labels != nil || k.Annotations != nil || k.Mounts != nil {
		t.Errorf("kept container status holds more than the relist reads: %v", k)
	}
	if keptSandbox(nil) != nil || keptContainer(nil) != nil {
		t.Error("a status not read is kept as something")
	}
}
