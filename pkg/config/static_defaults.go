package config

import (
	"strings"

	v1 "k8s.io/api/core/v1"
)

// The apiserver defaults every pod it stores; a static pod never goes
// through it, so the agent applies the same defaults the kubelet applies
// to file pods (the API's v1 defaulting, which lives in k8s.io/kubernetes
// and is not imported here). These are the fields the agent reads:
//
//   - pod: restartPolicy Always, terminationGracePeriodSeconds 30,
//     dnsPolicy ClusterFirst, schedulerName default-scheduler,
//     enableServiceLinks true, an empty securityContext, host ports
//     equal to container ports on the host network;
//   - containers (init too): imagePullPolicy (Always for :latest or no
//     tag, else IfNotPresent), terminationMessagePath /dev/termination-log
//     and policy File, port protocol TCP, requests equal to limits where
//     only limits are set, probe timings (1s timeout, 10s period,
//     thresholds 1 and 3), httpGet path / and scheme HTTP in probes and
//     hooks, fieldRef apiVersion v1;
//   - volumes: emptyDir when no source is set, hostPath type "",
//     downwardAPI and projected defaultMode 0644 and fieldRef apiVersion v1.
//
// Not applied: pod-level resources' requests from limits, and defaults of
// fields that the agent refuses in static pods anyway (secret and
// configMap volumes, service accounts).
func applyAPIDefaults(pod *v1.Pod) {
	s := &pod.Spec
	if s.RestartPolicy == "" {
		s.RestartPolicy = v1.RestartPolicyAlways
	}
	if s.TerminationGracePeriodSeconds == nil {
		grace := int64(v1.DefaultTerminationGracePeriodSeconds)
		s.TerminationGracePeriodSeconds = &grace
	}
	if s.DNSPolicy == "" {
		s.DNSPolicy = v1.DNSClusterFirst
	}
	if s.SchedulerName == "" {
		s.SchedulerName = v1.DefaultSchedulerName
	}
	if s.EnableServiceLinks == nil {
		links := v1.DefaultEnableServiceLinks
		s.EnableServiceLinks = &links
	}
	if s.SecurityContext == nil {
		s.SecurityContext = &v1.PodSecurityContext{}
	}
	for _, c := range allContainers(pod) {
		defaultContainer(c, s.HostNetwork)
	}
	for i := range s.Volumes {
		defaultVolume(&s.Volumes[i])
	}
}

func defaultContainer(c *v1.Container, hostNetwork bool) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = v1.PullIfNotPresent
		if imageTag(c.Image) == "latest" {
			c.ImagePullPolicy = v1.PullAlways
		}
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = v1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = v1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		p := &c.Ports[i]
		if p.Protocol == "" {
			p.Protocol = v1.ProtocolTCP
		}
		if hostNetwork && p.HostPort == 0 {
			p.HostPort = p.ContainerPort
		}
	}
	if len(c.Resources.Limits) > 0 {
		for name, q := range c.Resources.Limits {
			if _, ok := c.Resources.Requests[name]; ok {
				continue
			}
			if c.Resources.Requests == nil {
				c.Resources.Requests = v1.ResourceList{}
			}
			c.Resources.Requests[name] = q.DeepCopy()
		}
	}
	for _, p := range []*v1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		defaultProbe(p)
	}
	if c.Lifecycle != nil {
		defaultHandler(c.Lifecycle.PostStart)
		defaultHandler(c.Lifecycle.PreStop)
	}
	for i := range c.Env {
		if vf := c.Env[i].ValueFrom; vf != nil && vf.FieldRef != nil && vf.FieldRef.APIVersion == "" {
			vf.FieldRef.APIVersion = "v1"
		}
	}
}

func defaultProbe(p *v1.Probe) {
	if p == nil {
		return
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = 1
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = 10
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = 3
	}
	defaultHTTPGet(p.HTTPGet)
}

func defaultHandler(h *v1.LifecycleHandler) {
	if h != nil {
		defaultHTTPGet(h.HTTPGet)
	}
}

func defaultHTTPGet(g *v1.HTTPGetAction) {
	if g == nil {
		return
	}
	if g.Path == "" {
		g.Path = "/"
	}
	if g.Scheme == "" {
		g.Scheme = v1.URISchemeHTTP
	}
}

func defaultVolume(v *v1.Volume) {
	if v.VolumeSource == (v1.VolumeSource{}) {
		v.EmptyDir = &v1.EmptyDirVolumeSource{}
	}
	mode := int32(v1.DownwardAPIVolumeSourceDefaultMode)
	if v.HostPath != nil && v.HostPath.Type == nil {
		unset := v1.HostPathUnset
		v.HostPath.Type = &unset
	}
	if d := v.DownwardAPI; d != nil {
		if d.DefaultMode == nil {
			d.DefaultMode = &mode
		}
		defaultDownwardItems(d.Items)
	}
	if p := v.Projected; p != nil {
		if p.DefaultMode == nil {
			p.DefaultMode = &mode
		}
		for _, s := range p.Sources {
			if s.DownwardAPI != nil {
				defaultDownwardItems(s.DownwardAPI.Items)
			}
		}
	}
}

func defaultDownwardItems(items []v1.DownwardAPIVolumeFile) {
	for i := range items {
		if f := items[i].FieldRef; f != nil && f.APIVersion == "" {
			f.APIVersion = "v1"
		}
	}
}

// imageTag is the tag of an image reference as the API's defaulting reads
// it: "latest" when neither a tag nor a digest is given, "" for a digest
// alone.
func imageTag(image string) string {
	name, _, hasDigest := strings.Cut(image, "@")
	lastSlash := strings.LastIndex(name, "/")
	if i := strings.LastIndex(name, ":"); i > lastSlash {
		return name[i+1:]
	}
	if hasDigest {
		return ""
	}
	return "latest"
}
