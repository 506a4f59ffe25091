package volume

import (
	"context"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func trustBundle(name, signer, pem string, labels map[string]string) *certificatesv1.ClusterTrustBundle {
	return &certificatesv1.ClusterTrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       certificatesv1.ClusterTrustBundleSpec{SignerName: signer, TrustBundle: pem},
	}
}

func TestProjectedClusterTrustBundle(t *testing.T) {
	all := &metav1.LabelSelector{}
	tests := []struct {
		name    string
		src     v1.ClusterTrustBundleProjection
		want    string
		wantErr string
	}{
		{name: "by name", src: v1.ClusterTrustBundleProjection{Name: ptr("one"), Path: "ca.pem"}, want: "PEM-1\n"},
		{name: "by name missing", src: v1.ClusterTrustBundleProjection{Name: ptr("nope"), Path: "ca.pem"}, wantErr: "clusterTrustBundle nope"},
		{name: "by name missing optional", src: v1.ClusterTrustBundleProjection{Name: ptr("nope"), Optional: ptr(true), Path: "ca.pem"}, want: ""},
		{name: "by signer, all labels", src: v1.ClusterTrustBundleProjection{SignerName: ptr("example.com/s"), LabelSelector: all, Path: "ca.pem"},
			want: "PEM-1\nPEM-2\n"},
		{name: "by signer, selected", src: v1.ClusterTrustBundleProjection{SignerName: ptr("example.com/s"),
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pick": "yes"}}, Path: "ca.pem"}, want: "PEM-2\n"},
		{name: "by signer, no selector matches nothing", src: v1.ClusterTrustBundleProjection{SignerName: ptr("example.com/s"), Path: "ca.pem"},
			wantErr: "no bundle matched"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t,
				trustBundle("one", "example.com/s", "PEM-1", nil),
				trustBundle("two", "example.com/s", "PEM-2", map[string]string{"pick": "yes"}),
				trustBundle("other", "example.com/other", "PEM-3", map[string]string{"pick": "yes"}))
			src := tc.src
			pod := basePod(withVolume("v", v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
				Sources: []v1.VolumeProjection{{ClusterTrustBundle: &src}}}}))
			mounts, err := f.mgr.MountPod(context.Background(), pod)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := readVol(t, mounts["v"], "ca.pem"); got != tc.want {
				t.Errorf("ca.pem = %q, want %q", got, tc.want)
			}
		})
	}
}
