package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func getList(t *testing.T, h http.Handler, target string) (*v1.PodList, int) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	if rec.Code != http.StatusOK {
		return nil, rec.Code
	}
	var list v1.PodList
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
		t.Fatalf("decode %s: %v", target, err)
	}
	if list.Kind != "PodList" || list.APIVersion != "v1" || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("%s: kind %q apiVersion %q content type %q", target, list.Kind, list.APIVersion, rec.Header().Get("Content-Type"))
	}
	return &list, rec.Code
}

func TestPodsEndpoint(t *testing.T) {
	pod := testPod()
	pod.Status.Phase = v1.PodRunning
	h := testAPI(&fakeRuntime{}, pod).routes()
	list, _ := getList(t, h, "/pods")
	if len(list.Items) != 1 || list.Items[0].UID != "uid-1" || list.Items[0].Status.Phase != v1.PodRunning || len(list.Items[0].Spec.Containers) != 2 {
		t.Errorf("/pods = %+v", list.Items)
	}
	if _, code := getList(t, h, "/pods/web"); code != http.StatusNotFound {
		t.Errorf("/pods/web = %d, want 404", code)
	}
	empty, _ := getList(t, testAPI(&fakeRuntime{}).routes(), "/pods/")
	if empty.Items == nil || len(empty.Items) != 0 {
		t.Errorf("empty /pods items = %#v, want []", empty.Items)
	}
}

func TestRunningPodsEndpoint(t *testing.T) {
	web := testPod()
	db := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "data", Name: "db", UID: "uid-db"}}
	gone := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "gone", UID: "uid-gone"}}
	rt := &fakeRuntime{
		sandboxes: []*runtimeapi.PodSandbox{
			testSandbox("sb-web", web, runtimeapi.PodSandboxState_SANDBOX_READY, 1),
			testSandbox("sb-db", db, runtimeapi.PodSandboxState_SANDBOX_READY, 1),
			testSandbox("sb-gone", gone, runtimeapi.PodSandboxState_SANDBOX_NOTREADY, 1),
			{Id: "foreign", State: runtimeapi.PodSandboxState_SANDBOX_READY, Labels: map[string]string{"app": "x"}},
		},
		containers: []*runtimeapi.Container{
			testContainer("web-side", web, "sidecar", "0", runtimeapi.ContainerState_CONTAINER_RUNNING, 2),
			testContainer("web-app", web, "app", "1", runtimeapi.ContainerState_CONTAINER_RUNNING, 2),
			testContainer("web-app-0", web, "app", "0", runtimeapi.ContainerState_CONTAINER_EXITED, 1),
			testContainer("gone-c", gone, "c", "0", runtimeapi.ContainerState_CONTAINER_EXITED, 1),
		},
	}
	list, _ := getList(t, testAPI(rt).routes(), "/runningpods/")
	if len(list.Items) != 2 {
		t.Fatalf("running pods = %+v", list.Items)
	}
	dbPod, webPod := list.Items[0], list.Items[1]
	if dbPod.Name != "db" || dbPod.Namespace != "data" || dbPod.UID != "uid-db" || len(dbPod.Spec.Containers) != 0 {
		t.Errorf("db = %+v", dbPod)
	}
	cs := webPod.Spec.Containers
	if webPod.UID != "uid-1" || len(cs) != 2 || cs[0].Name != "app" || cs[0].Image != "docker.io/library/app" || cs[1].Name != "sidecar" {
		t.Errorf("web = %+v", webPod)
	}
}

func TestRunningPodsRuntimeError(t *testing.T) {
	rec := httptest.NewRecorder()
	testAPI(&fakeRuntime{err: errors.New("runtime down")}).routes().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/runningpods", nil))
	if rec.Code != http.StatusInternalServerError {
		t.Errorf("code %d", rec.Code)
	}
}
