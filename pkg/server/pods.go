package server

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// routes is the API behind authentication and authorization.
func (a *api) routes() http.Handler {
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write([]byte("ok"))
	}
	mux.HandleFunc("GET /healthz", ok)
	mux.HandleFunc("GET /healthz/ping", ok)
	mux.HandleFunc("GET /pods", a.getPods)
	mux.HandleFunc("GET /pods/{$}", a.getPods)
	a.timelineRoutes(mux)
	if !a.debugging {
		debuggingDisabledRoutes(mux)
		a.monitoringRoutes(mux)
		return mux
	}
	mux.HandleFunc("GET /runningpods", a.getRunningPods)
	mux.HandleFunc("GET /runningpods/{$}", a.getRunningPods)
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", a.getContainerLogs)
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		mux.HandleFunc(m+" /exec/{namespace}/{pod}/{container}", a.exec)
		mux.HandleFunc(m+" /exec/{namespace}/{pod}/{uid}/{container}", a.exec)
		mux.HandleFunc(m+" /attach/{namespace}/{pod}/{container}", a.attach)
		mux.HandleFunc(m+" /attach/{namespace}/{pod}/{uid}/{container}", a.attach)
		mux.HandleFunc(m+" /portForward/{namespace}/{pod}", a.portForward)
		mux.HandleFunc(m+" /portForward/{namespace}/{pod}/{uid}", a.portForward)
	}
	// The kubelet serves the node's logs only with its debugging handlers.
	if a.nodeLogs != nil {
		mux.HandleFunc("GET "+nodeLogsPrefix, a.nodeLogs.serve)
	} else {
		mux.HandleFunc(nodeLogsPrefix, func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "logs endpoint is disabled.", http.StatusMethodNotAllowed)
		})
	}
	mux.HandleFunc("POST /run/{namespace}/{pod}/{container}", a.run)
	mux.HandleFunc("POST /run/{namespace}/{pod}/{uid}/{container}", a.run)
	a.monitoringRoutes(mux)
	return mux
}

// getPods answers /pods: the pods the agent is asked to run, as a v1.PodList.
func (a *api) getPods(w http.ResponseWriter, r *http.Request) {
	pods := a.pods()
	list := &v1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: make([]v1.Pod, 0, len(pods))}
	for _, p := range pods {
		list.Items = append(list.Items, *p)
	}
	writeJSON(w, r, list)
}

// getRunningPods answers /runningpods: what the runtime runs, as the kubelet
// shows it: one pod per ready sandbox or running container, carrying only
// names, UID and the running containers' names and images.
func (a *api) getRunningPods(w http.ResponseWriter, r *http.Request) {
	pods, err := a.runningPods(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	list := &v1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: pods}
	writeJSON(w, r, list)
}

func (a *api) runningPods(ctx context.Context) ([]v1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, a.callTimeout)
	defer cancel()
	sbs, err := a.runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
	}})
	if err != nil {
		return nil, errorf(http.StatusInternalServerError, "list pod sandboxes: %w", err)
	}
	cs, err := a.runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	}})
	if err != nil {
		return nil, errorf(http.StatusInternalServerError, "list containers: %w", err)
	}
	return groupRunningPods(sbs.GetItems(), cs.GetContainers()), nil
}

// groupRunningPods builds pods from the runtime's objects by their pod
// labels; objects the agent did not make (no pod UID label) are left out.
func groupRunningPods(sbs []*runtimeapi.PodSandbox, cs []*runtimeapi.Container) []v1.Pod {
	byUID := map[types.UID]*v1.Pod{}
	get := func(labels map[string]string) *v1.Pod {
		uid := types.UID(labels[labelPodUID])
		if uid == "" {
			return nil
		}
		p, ok := byUID[uid]
		if !ok {
			p = &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid, Name: labels[labelPodName], Namespace: labels[labelPodNamespace]}}
			byUID[uid] = p
		}
		return p
	}
	for _, sb := range sbs {
		get(sb.GetLabels())
	}
	for _, c := range cs {
		p := get(c.GetLabels())
		if p == nil {
			continue
		}
		image := c.GetImage().GetUserSpecifiedImage()
		if image == "" {
			image = c.GetImage().GetImage()
		}
		name := c.GetLabels()[labelContainerName]
		if name == "" {
			name = c.GetMetadata().GetName()
		}
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: name, Image: image})
	}
	pods := make([]v1.Pod, 0, len(byUID))
	for _, p := range byUID {
		sort.Slice(p.Spec.Containers, func(i, j int) bool { return p.Spec.Containers[i].Name < p.Spec.Containers[j].Name })
		pods = append(pods, *p)
	}
	sort.Slice(pods, func(i, j int) bool {
		if pods[i].Namespace != pods[j].Namespace {
			return pods[i].Namespace < pods[j].Namespace
		}
		return pods[i].Name < pods[j].Name
	})
	return pods
}

func writeJSON(w http.ResponseWriter, r *http.Request, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(data); err != nil {
		klog.FromContext(r.Context()).V(3).Info("Writing response failed", "path", r.URL.Path, "err", err.Error())
	}
}
