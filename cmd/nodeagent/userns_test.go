package main

import (
	"os"
	"path/filepath"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/pkg/userns"
)

func TestHandlerSupportsUserNamespaces(t *testing.T) {
	st := &runtimeapi.StatusResponse{RuntimeHandlers: []*runtimeapi.RuntimeHandler{
		{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{UserNamespaces: true}},
		{Name: "runc", Features: &runtimeapi.RuntimeHandlerFeatures{UserNamespaces: true}},
		{Name: "old", Features: &runtimeapi.RuntimeHandlerFeatures{}},
		{Name: "bare"},
	}}
	for handler, want := range map[string]bool{"": true, "runc": true, "old": false, "bare": false} {
		if got, err := handlerSupportsUserNamespaces(st, handler); err != nil || got != want {
			t.Errorf("handler %q: %v %v, want %v", handler, got, err, want)
		}
	}
	if _, err := handlerSupportsUserNamespaces(st, "kata"); err == nil || err.Error() != `the handler "kata" is not known` {
		t.Errorf("an unknown handler: %v", err)
	}
	// A runtime too old to list its handlers supports none.
	if _, err := handlerSupportsUserNamespaces(&runtimeapi.StatusResponse{}, ""); err == nil || err.Error() != "runtime handlers are not set" {
		t.Errorf("no handlers listed: %v", err)
	}
}

// TestNewUserNamespaces: the allocator is made from the configuration and the host's
// files, and refuses to start where the kubelet would.
func TestNewUserNamespaces(t *testing.T) {
	for _, tc := range []struct {
		name      string
		idsPerPod *int64
		subuid    string // the kubelet user's entry, in both files; none: no such user
		wantFirst uint32
		wantErr   string
	}{
		{name: "defaults", wantFirst: 65536},
		{name: "idsPerPod honoured", idsPerPod: ptr.To[int64](131072), wantFirst: 131072},
		{name: "the kubelet user's range", subuid: "kubelet:655360:7208960", wantFirst: 655360},
		{name: "a range too small for maxPods", subuid: "kubelet:65536:655360",
			wantErr: "user namespaces: kubelet user assigned IDs are not enough to support 110 pods"},
		{name: "an invalid idsPerPod", idsPerPod: ptr.To[int64](1000),
			wantErr: "user namespaces: userNamespaces.idsPerPod must not be less than 65536"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write := func(name, content string) string {
				p := filepath.Join(dir, name)
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
				return p
			}
			passwd := "root:x:0:0::/root:/bin/sh\n"
			if tc.subuid != "" {
				passwd += "kubelet:x:999:999::/:/usr/sbin/nologin\n"
			}
			old := userNamespaceFiles
			t.Cleanup(func() { userNamespaceFiles = old })
			userNamespaceFiles = userns.Files{Passwd: write("passwd", passwd), Subuid: write("subuid", tc.subuid+"\n"), Subgid: write("subgid", tc.subuid+"\n")}

			kc := &kubeletv1beta1.KubeletConfiguration{MaxPods: 110}
			if tc.idsPerPod != nil {
				kc.UserNamespaces = &kubeletv1beta1.UserNamespaces{IDsPerPod: tc.idsPerPod}
			}
			u, err := newUserNamespaces(&agentConfig{kubelet: kc, rootDir: filepath.Join(dir, "root")}, nil)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ns, err := u.Mapping("pod-a")
			if err != nil {
				t.Fatal(err)
			}
			per := uint32(65536)
			if tc.idsPerPod != nil {
				per = uint32(*tc.idsPerPod)
			}
			m := ns.GetUids()[0]
			if m.GetHostId() < tc.wantFirst || (m.GetHostId()-tc.wantFirst)%per != 0 || m.GetLength() != per || m.GetContainerId() != 0 {
				t.Errorf("mapping %v, want %d IDs on a slot from %d", m, per, tc.wantFirst)
			}
			if _, err := os.Stat(filepath.Join(dir, "root", "pods", "pod-a", "userns")); err != nil {
				t.Errorf("the pod's record: %v", err)
			}
			if ns.GetMode() != runtimeapi.NamespaceMode_POD {
				t.Errorf("mode of %v, want POD", ns)
			}
		})
	}
}
