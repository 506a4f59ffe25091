package runtime

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestContainerConfigEphemeral(t *testing.T) {
	share := true
	base := func(mut ...func(*v1.Pod)) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "busybox"}}}}
		for _, m := range mut {
			m(p)
		}
		return p
	}
	debugger := &v1.Container{Name: "debugger", Image: "busybox"}
	tests := []struct {
		name     string
		pod      *v1.Pod
		in       ContainerInputs
		wantType string
		wantPid  runtimeapi.NamespaceMode
		wantID   string
	}{
		{name: "ephemeral without a target: its own PID namespace", pod: base(),
			in: ContainerInputs{Ephemeral: true}, wantType: containerTypeEphemeral, wantPid: runtimeapi.NamespaceMode_CONTAINER},
		{name: "ephemeral with a target: the target's PID namespace", pod: base(),
			in: ContainerInputs{Ephemeral: true, TargetID: "target-id"}, wantType: containerTypeEphemeral,
			wantPid: runtimeapi.NamespaceMode_TARGET, wantID: "target-id"},
		{name: "shared process namespace: the pod's, whatever the target", pod: base(func(p *v1.Pod) { p.Spec.ShareProcessNamespace = &share }),
			in: ContainerInputs{Ephemeral: true, TargetID: "target-id"}, wantType: containerTypeEphemeral, wantPid: runtimeapi.NamespaceMode_POD},
		{name: "host PID: the node's", pod: base(func(p *v1.Pod) { p.Spec.HostPID = true }),
			in: ContainerInputs{Ephemeral: true, TargetID: "target-id"}, wantType: containerTypeEphemeral, wantPid: runtimeapi.NamespaceMode_NODE},
		{name: "init container", pod: base(), in: ContainerInputs{Init: true}, wantType: containerTypeInit, wantPid: runtimeapi.NamespaceMode_CONTAINER},
		{name: "app container", pod: base(), in: ContainerInputs{}, wantType: containerTypeApp, wantPid: runtimeapi.NamespaceMode_CONTAINER},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sec, err := ContainerSecurity(tt.pod, debugger, SecurityOptions{}, ImageUser{})
			if err != nil {
				t.Fatal(err)
			}
			tt.in.Security = sec
			cfg := ContainerConfig(tt.pod, debugger, tt.in)
			if got := cfg.Annotations[AnnotationContainerType]; got != tt.wantType {
				t.Errorf("container type = %q, want %q", got, tt.wantType)
			}
			ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
			if ns.GetPid() != tt.wantPid || ns.GetTargetId() != tt.wantID {
				t.Errorf("pid namespace = %v target %q, want %v target %q", ns.GetPid(), ns.GetTargetId(), tt.wantPid, tt.wantID)
			}

			// What the agent wrote is what it reads back after a restart.
			c := &runtimeapi.Container{Id: "x", Labels: cfg.Labels, Annotations: cfg.Annotations}
			got, _, ok := ContainerFromCRI(c, nil)
			if !ok {
				t.Fatal("container not recognised as the agent's")
			}
			if got.Ephemeral != tt.in.Ephemeral || got.Init != tt.in.Init || got.Name != "debugger" {
				t.Errorf("read back ephemeral=%v init=%v name=%q, want %v %v debugger", got.Ephemeral, got.Init, got.Name, tt.in.Ephemeral, tt.in.Init)
			}
		})
	}
}
