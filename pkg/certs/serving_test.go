package certs

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/kube/kubetest"
)

func TestServingTemplate(t *testing.T) {
	tests := []struct {
		name    string
		addrs   []v1.NodeAddress
		wantDNS []string
		wantIPs []string
	}{
		{name: "no addresses"},
		{name: "hostname only: no CSR", addrs: []v1.NodeAddress{{Type: v1.NodeHostName, Address: "node-1"}}},
		{name: "internal IP and hostname", addrs: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: "10.0.0.5"}, {Type: v1.NodeHostName, Address: "node-1"},
		}, wantDNS: []string{"node-1"}, wantIPs: []string{"10.0.0.5"}},
		{name: "sorted, no duplicates, DNS names kept", addrs: []v1.NodeAddress{
			{Type: v1.NodeExternalIP, Address: "192.0.2.9"}, {Type: v1.NodeInternalIP, Address: "10.0.0.5"},
			{Type: v1.NodeHostName, Address: "10.0.0.5"}, {Type: v1.NodeInternalDNS, Address: "node-1.internal"},
			{Type: v1.NodeHostName, Address: "node-1"}, {Type: v1.NodeExternalDNS, Address: "node-1.internal"},
		}, wantDNS: []string{"node-1", "node-1.internal"}, wantIPs: []string{"10.0.0.5", "192.0.2.9"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := servingTemplate("node-1", tt.addrs)
			if tt.wantIPs == nil {
				if got != nil {
					t.Errorf("template %+v, want none", got)
				}
				return
			}
			var ips []string
			for _, ip := range got.IPAddresses {
				ips = append(ips, ip.String())
			}
			if got.Subject.CommonName != "system:node:node-1" || !slices.Equal(got.Subject.Organization, []string{"system:nodes"}) ||
				!slices.Equal(got.DNSNames, tt.wantDNS) || !slices.Equal(ips, tt.wantIPs) {
				t.Errorf("template subject %v DNS %v IPs %v", got.Subject, got.DNSNames, ips)
			}
		})
	}
}

func TestServingRequestsFromTheKubeletServingSigner(t *testing.T) {
	ca := newTestCA(t)
	client, signer := newSignerClient(t, ca, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := NewServing(ctx, ServingConfig{
		Client:   kubetest.Wrap(client),
		CertDir:  t.TempDir(),
		NodeName: "node-1",
		Addresses: func() []v1.NodeAddress {
			return []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.5"}, {Type: v1.NodeHostName, Address: "node-1"}}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Current() != nil {
		t.Fatal("a serving certificate before any was issued")
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for s.Current() == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	cur := s.Current()
	if cur == nil {
		t.Fatal("no serving certificate within 10s")
	}
	if err := cur.Leaf.VerifyHostname("node-1"); err != nil {
		t.Error(err)
	}
	if !slices.ContainsFunc(cur.Leaf.IPAddresses, net.ParseIP("10.0.0.5").Equal) {
		t.Errorf("IPs %v", cur.Leaf.IPAddresses)
	}
	sent := signer.sent()
	if len(sent) == 0 || sent[0].Spec.SignerName != certificatesv1.KubeletServingSignerName {
		t.Fatalf("CSRs %v", sent)
	}
	want := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
	if !slices.Equal(sent[0].Spec.Usages, want) {
		t.Errorf("usages %v, want %v", sent[0].Spec.Usages, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}
