package config

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// DefaultHTTPCheckFrequency is the kubelet's httpCheckFrequency.
const DefaultHTTPCheckFrequency = 20 * time.Second

// httpTimeout bounds one read of the URL, as the kubelet's client does: a
// server that hangs costs one period, not the source.
const httpTimeout = 10 * time.Second

// quietAfter is how many failed reads in a row are logged at the default
// verbosity; the later ones are logged at V(4) until a read succeeds.
const quietAfter = 3

// HTTPConfig configures an HTTPSource.
type HTTPConfig struct {
	// URL is staticPodURL: a GET of it answers one pod or a PodList (v1),
	// in YAML or JSON, or an empty body for no pods.
	URL string
	// Header is staticPodURLHeader, sent with every GET.
	Header http.Header
	// NodeName suffixes the pods' names and binds them here.
	NodeName string
	// Period is httpCheckFrequency, how often URL is read again;
	// defaults to DefaultHTTPCheckFrequency.
	Period time.Duration
	// Recorder gets a Warning event on the Node for a body that cannot be
	// run; nil records none.
	Recorder Recorder
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// Client defaults to one that gives up on a read after 10s.
	Client *http.Client
}

// HTTPSource reads static pods from a URL, as the kubelet's staticPodURL,
// and hands its handler each pod that appears or disappears. A read that
// fails (no answer, a status other than 200 OK, a body that is no pod)
// changes nothing: the pods of the last good read keep running. A changed
// pod is a new pod (its UID is a hash of the content): the old one is
// removed and the new one added. It needs no apiserver.
type HTTPSource struct {
	*staticSource
	cfg HTTPConfig

	failures int // failed reads in a row; the reading goroutine's only
}

// NewHTTPSource validates cfg and builds the source; SetHandler names its
// handler and Run starts reading.
func NewHTTPSource(cfg HTTPConfig) (*HTTPSource, error) {
	if cfg.URL == "" || cfg.NodeName == "" {
		return nil, errors.New("config: URL and NodeName are required")
	}
	// The kubelet would only fail at every read; say it once, at start.
	if u, err := url.Parse(cfg.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("config: static pod URL %q: want an http or https URL", cfg.URL)
	}
	if cfg.Period <= 0 {
		cfg.Period = DefaultHTTPCheckFrequency
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: httpTimeout}
	}
	shared := newStaticSource(SourceHTTP, "manifest URL", cfg.NodeName, cfg.Period, cfg.Clock, cfg.Recorder)
	return &HTTPSource{staticSource: shared, cfg: cfg}, nil
}

// Run reads the URL at once, then every Period, until ctx ends.
func (s *HTTPSource) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("staticpods").WithValues("url", s.cfg.URL)
	return s.run(klog.NewContext(ctx, logger), s.sync)
}

// sync reads the URL once and hands over what changed.
func (s *HTTPSource) sync(ctx context.Context, h Handler) {
	logger := klog.FromContext(ctx)
	data, err := s.get(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.failed(logger, err)
		}
		return
	}
	if s.failures > 0 {
		logger.Info("Read static pods from the URL again", "failures", s.failures)
		s.failures = 0
	}
	// As the kubelet: an empty body is a good read of no pods.
	var pods []*v1.Pod
	if len(data) > 0 {
		if pods, err = decodeURLPods(s.cfg.URL, data, s.cfg.NodeName); err != nil {
			s.report(logger, []problem{{where: s.cfg.URL, err: err}})
			return
		}
	}
	var problems []problem
	pods, err = keepFirstByName(pods)
	if err != nil {
		problems = append(problems, problem{where: s.cfg.URL, err: err})
	}
	s.report(logger, problems)
	s.replace(logger, h, pods)
}

// get reads the URL's body; any answer but 200 OK is an error.
func (s *HTTPSource) get(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.URL, nil)
	if err != nil {
		return nil, err
	}
	req.Header = s.cfg.Header.Clone()
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	// The body is read whatever the status, so the connection is reused.
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxManifestSize+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("read body: %w", err)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("GET %s: %s", s.cfg.URL, resp.Status)
	case len(data) > maxManifestSize:
		return nil, fmt.Errorf("GET %s: body larger than %d bytes", s.cfg.URL, maxManifestSize)
	}
	return data, nil
}

// failed logs a read that failed: the first few in a row at the default
// verbosity, the rest at V(4), as the kubelet does not to flood its log
// while a server is down.
func (s *HTTPSource) failed(logger klog.Logger, err error) {
	s.failures++
	switch {
	case s.failures < quietAfter:
		logger.Info("Failed to read static pods from the URL; the pods read last keep running", "err", err)
	case s.failures == quietAfter:
		logger.Info("Failed to read static pods from the URL; further failures are logged at verbosity 4", "err", err)
	default:
		logger.V(4).Info("Failed to read static pods from the URL", "err", err, "failures", s.failures)
	}
}

// decodeURLPods turns a body (YAML or JSON) holding one v1 Pod or a v1
// PodList into the pods the agent runs, each made as makeStaticPod makes
// a file's, with the URL as origin. As the kubelet, one pod that cannot
// be run makes the whole body unusable.
func decodeURLPods(rawURL string, data []byte, nodeName string) ([]*v1.Pod, error) {
	doc, tm, err := decodeManifest(data)
	if err != nil {
		return nil, err
	}
	origin := "url:" + rawURL
	switch {
	case tm.APIVersion == "v1" && tm.Kind == "Pod":
		pod := &v1.Pod{}
		if err := json.Unmarshal(doc, pod); err != nil {
			return nil, fmt.Errorf("decode pod: %w", err)
		}
		p, err := makeStaticPod(pod, origin, nodeName)
		if err != nil {
			return nil, err
		}
		return []*v1.Pod{p}, nil
	case tm.APIVersion == "v1" && tm.Kind == "PodList":
		list := &v1.PodList{}
		if err := json.Unmarshal(doc, list); err != nil {
			return nil, fmt.Errorf("decode pod list: %w", err)
		}
		pods := make([]*v1.Pod, 0, len(list.Items))
		for i := range list.Items {
			// A list's items carry no type; a pod hashes the same whether
			// served alone or in a list.
			item := &list.Items[i]
			item.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
			p, err := makeStaticPod(item, origin, nodeName)
			if err != nil {
				return nil, fmt.Errorf("items[%d]: %w", i, err)
			}
			pods = append(pods, p)
		}
		return pods, nil
	}
	return nil, fmt.Errorf("not a v1 Pod or PodList: apiVersion %q kind %q", tm.APIVersion, tm.Kind)
}

// keepFirstByName keeps the first of the pods sharing a namespace and
// name, as the kubelet does within one source's update; the error names
// those dropped.
func keepFirstByName(pods []*v1.Pod) ([]*v1.Pod, error) {
	seen := map[string]bool{}
	out := make([]*v1.Pod, 0, len(pods))
	var errs []error
	for _, p := range pods {
		key := p.Namespace + "/" + p.Name
		if seen[key] {
			errs = append(errs, fmt.Errorf("pod %s is defined more than once: the first is used", key))
			continue
		}
		seen[key] = true
		out = append(out, p)
	}
	return out, errors.Join(errs...)
}
