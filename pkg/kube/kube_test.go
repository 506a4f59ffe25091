package kube

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// apiserver answers every request with a JSON object of the kind the path
// names, and records the method, path and query.
type apiserver struct {
	mu   sync.Mutex
	seen []string
}

func (a *apiserver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.seen = append(a.seen, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
	a.mu.Unlock()
	kind, apiVersion := "Pod", "v1"
	switch {
	case strings.HasSuffix(r.URL.Path, "/token"):
		kind, apiVersion = "TokenRequest", "authentication.k8s.io/v1"
	case strings.Contains(r.URL.Path, "/leases"):
		kind, apiVersion = "Lease", "coordination.k8s.io/v1"
	case strings.Contains(r.URL.Path, "/events"):
		kind = "Event"
	case strings.HasSuffix(r.URL.Path, "/pods"):
		kind = "PodList"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"kind": kind, "apiVersion": apiVersion,
		"metadata": map[string]any{"name": "answered"},
		"status":   map[string]any{"token": "t0k3n"},
	})
}

func TestClientPaths(t *testing.T) {
	api := &apiserver{}
	srv := httptest.NewServer(api)
	defer srv.Close()
	c, err := NewForConfig(&rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	pod, err := c.CoreV1().Pods("ns").Get(ctx, "web", metav1.GetOptions{ResourceVersion: "0"})
	if err != nil || pod.Name != "answered" {
		t.Fatalf("Get pod = %v, %v", pod, err)
	}
	list, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=n1"})
	if err != nil || list == nil {
		t.Fatalf("List pods = %v, %v", list, err)
	}
	if _, err := c.CoreV1().Pods("ns").Patch(ctx, "web", types.StrategicMergePatchType, []byte(`{}`), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	lease, err := c.CoordinationV1().Leases("kube-node-lease").Update(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.UpdateOptions{})
	if err != nil || lease.Name != "answered" {
		t.Fatalf("Update lease = %v, %v", lease, err)
	}
	tr, err := c.CoreV1().ServiceAccounts("ns").CreateToken(ctx, "default", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil || tr.Status.Token != "t0k3n" {
		t.Fatalf("CreateToken = %v, %v", tr, err)
	}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web.1"}}
	if _, err := (EventSink{Client: c}).Create(ev); err != nil {
		t.Fatal(err)
	}
	if _, err := (EventSink{Client: c}).Patch(ev, []byte(`{"count":2}`)); err != nil {
		t.Fatal(err)
	}

	want := []string{
		"GET /api/v1/namespaces/ns/pods/web?resourceVersion=0",
		"GET /api/v1/pods?fieldSelector=spec.nodeName%3Dn1",
		"PATCH /api/v1/namespaces/ns/pods/web/status?",
		"PUT /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1?",
		"POST /api/v1/namespaces/ns/serviceaccounts/default/token?",
		"POST /api/v1/namespaces/ns/events?",
		"PATCH /api/v1/namespaces/ns/events/web.1?",
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if strings.Join(api.seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(api.seen, "\n"), strings.Join(want, "\n"))
	}
}

// TestSchemeHoldsOnlyTheAgentsGroups guards the point of the package: the
// scheme knows the groups the agent talks to and no other.
func TestSchemeHoldsOnlyTheAgentsGroups(t *testing.T) {
	groups := map[string]bool{}
	for gvk := range Scheme.AllKnownTypes() {
		groups[gvk.Group] = true
	}
	for _, g := range []string{"", "coordination.k8s.io", "storage.k8s.io", "certificates.k8s.io", "authentication.k8s.io", "authorization.k8s.io", "node.k8s.io"} {
		if !groups[g] {
			t.Errorf("group %q missing", g)
		}
		delete(groups, g)
	}
	if len(groups) != 0 {
		t.Errorf("groups the agent does not use: %v", groups)
	}
}
