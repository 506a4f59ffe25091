package main

import (
	"strings"
	"testing"
)

func TestCountCSIMounts(t *testing.T) {
	const root = "/var/lib/nodeagent-harness/agent/root"
	line := func(mountPoint string) string {
		return "1234 27 0:52 / " + mountPoint + " rw,relatime shared:99 - tmpfs tmpfs rw\n"
	}
	tests := []struct {
		name   string
		points []string
		want   int
	}{
		{name: "none", points: []string{"/", "/proc", root + "/pods/u1/volumes/kubernetes.io~projected/kube-api-access-x"}},
		{name: "published", points: []string{root + "/pods/u1/volumes/kubernetes.io~csi/pvc-1/mount"}, want: 1},
		{name: "staged", points: []string{root + "/plugins/kubernetes.io/csi/hostpath.csi.k8s.io/abc/globalmount"}, want: 1},
		{name: "another root", points: []string{"/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pvc-1/mount"}},
		{name: "both of two pods", points: []string{
			root + "/pods/u1/volumes/kubernetes.io~csi/pvc-1/mount",
			root + "/pods/u2/volumes/kubernetes.io~csi/pvc-2/mount",
			root + "/plugins/kubernetes.io/csi/hostpath.csi.k8s.io/abc/globalmount",
		}, want: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			for _, p := range tt.points {
				b.WriteString(line(p))
			}
			got, err := countCSIMounts(strings.NewReader(b.String()), root)
			if err != nil || got != tt.want {
				t.Errorf("countCSIMounts = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

func TestFiguresFor(t *testing.T) {
	if got := len(figuresFor(false)); got != len(baseFigures) {
		t.Errorf("default rows: %d, want %d", got, len(baseFigures))
	}
	pvc := figuresFor(true)
	if len(pvc) != len(baseFigures)+len(pvcFigures) {
		t.Errorf("-pvc rows: %d, want %d", len(pvc), len(baseFigures)+len(pvcFigures))
	}
	for _, f := range baseFigures {
		if strings.Contains(f.name, "CSI") {
			t.Errorf("the default table names CSI: %q", f.name)
		}
	}
}
