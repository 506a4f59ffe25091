package sync

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/pkg/probe"
	"github.com/nodeagent/nodeagent/pkg/runtime"
	"github.com/nodeagent/nodeagent/pkg/status"
)

// The scenario tests replay a pod's life through decide and advance. Each
// file under testdata/scenarios is a script of commands, each followed by
// "----" and the output it must give (then a blank line), as in etcd
// raft's datadriven tests. The world is a fake runtime that carries steps
// out as a real one would, so a script reads as the pod's story:
//
//	pod policy=Never init=i1 containers=a,b [sidecars=s] [deadline=30] [grace=5]
//	    [own=a:Never,...] [restart-on=a:42,...]  a container's own restartPolicy;
//	                                           a rule restarting it on that exit code
//	run NAME | create NAME | exit NAME CODE    the runtime changes by itself
//	sandbox-dies                               the latest sandbox stops
//	probe NAME liveness=failure                a probe's verdict
//	tick 10s                                   time passes
//	started                                    the apiserver records the pod's start time
//	delete [grace=N] | remove                  the pod is deleted; it left the source
//	decide                                     print the next step, change nothing
//	step [pull-failed=IMAGE] [cancelled] [fail] carry the next step out, print it and the state
//	     [sandbox-failed]                      (the runtime refuses the sandbox)
//	     [start-failed]                        (starts of containers left created fail)
//	restart-agent                              a new agent: what the worker kept is lost
//	status                                     print the status computed now
//
// go test ./pkg/sync -run TestScenarios -update rewrites the outputs.
var update = flag.Bool("update", false, "rewrite the expected outputs of testdata/scenarios")

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/scenarios/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			runScenario(t, file)
		})
	}
}

// scenario is the world a script runs in.
type scenario struct {
	pod      *v1.Pod
	removed  bool
	observed *runtime.PodStatus
	probes   probeResults
	state    podState
	now      time.Time
	ids      int
}

func runScenario(t *testing.T, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sc := &scenario{now: t0, observed: &runtime.PodStatus{PodRef: runtime.PodRef{UID: "uid-1"}}, probes: probeResults{}}
	var out strings.Builder
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			out.WriteString(line + "\n")
			continue
		}
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: a command is followed by ----", file, i+1)
		}
		var want []string
		j := i + 2
		for ; j < len(lines) && lines[j] != ""; j++ {
			want = append(want, lines[j])
		}
		got, err := sc.run(line)
		if err != nil {
			t.Fatalf("%s:%d: %s: %v", file, i+1, line, err)
		}
		if !*update && strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s:%d: %s\n got:\n%s\nwant:\n%s", file, i+1, line, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		out.WriteString(line + "\n----\n")
		for _, g := range got {
			out.WriteString(g + "\n")
		}
		i = j - 1
		if j < len(lines) {
			out.WriteString("\n")
			i = j
		}
	}
	if *update {
		if err := os.WriteFile(file, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func (sc *scenario) input() input {
	observed, abandoned := withoutAbandonedStarts(sc.observed)
	return input{pod: sc.pod, removed: sc.removed, observed: observed, abandoned: abandoned, probes: sc.probes, now: sc.now,
		resync: DefaultResyncPeriod, maxRestartBackoff: backoffMax}
}

// run does one command and returns its output.
func (sc *scenario) run(line string) ([]string, error) {
	f := strings.Fields(line)
	args := map[string]string{}
	for _, a := range f[1:] {
		k, v, _ := strings.Cut(a, "=")
		args[k] = v
	}
	if sc.pod == nil && f[0] != "pod" {
		return nil, fmt.Errorf("no pod yet")
	}
	switch f[0] {
	case "pod":
		sc.pod = scenarioPod(args)
	case "run", "create":
		if len(f) < 2 {
			return nil, fmt.Errorf("usage: %s NAME", f[0])
		}
		st := runtime.ContainerRunning
		if f[0] == "create" {
			st = runtime.ContainerCreated
		}
		sc.add(f[1], st)
	case "start-abandoned":
		// The agent died inside StartContainer: the runtime cancels the start
		// and reports the container exited, never started.
		if len(f) < 2 {
			return nil, fmt.Errorf("usage: start-abandoned NAME")
		}
		sc.add(f[1], runtime.ContainerCreated)
		c := sc.observed.Latest(f[1])
		c.State, c.ExitCode, c.FinishedAt = runtime.ContainerExited, 128, sc.now
		c.Reason, c.Message = "StartError", `failed to start containerd task "`+c.ID+`": context canceled`
	case "exit":
		if len(f) < 3 {
			return nil, fmt.Errorf("usage: exit NAME CODE")
		}
		code, err := strconv.Atoi(f[2])
		if err != nil {
			return nil, err
		}
		c := sc.observed.Latest(f[1])
		if c == nil || c.State != runtime.ContainerRunning {
			return nil, fmt.Errorf("%s is not running", f[1])
		}
		c.State, c.ExitCode, c.FinishedAt = runtime.ContainerExited, int32(code), sc.now
	case "sandbox-dies":
		if sb := sc.observed.LatestSandbox(); sb != nil {
			sb.Ready = false
		}
	case "sandbox-appears":
		// A ready sandbox the agent did not see made: a RunPodSandbox that
		// completed in the runtime after its caller gave up on it.
		sc.ids++
		attempt := uint32(0)
		if sb := sc.observed.LatestSandbox(); sb != nil {
			attempt = sb.Attempt
		}
		sc.observed.Sandboxes = append(sc.observed.Sandboxes, &runtime.SandboxStatus{ID: fmt.Sprintf("sb-%d", sc.ids),
			Attempt: attempt, Ready: true, CreatedAt: sc.now.Add(time.Duration(sc.ids) * time.Microsecond)})
		sc.observed.SortNewestFirst()
	case "probe":
		c := sc.observed.Latest(f[1])
		if c == nil {
			return nil, fmt.Errorf("no container %s", f[1])
		}
		r := sc.probes[c.ID]
		for k, v := range args {
			res := probe.Success
			if v == "failure" {
				res = probe.Failure
			}
			switch k {
			case "liveness":
				r.Liveness = res
			case "startup":
				r.Startup = res
			case "readiness":
				r.Readiness = res
			}
		}
		sc.probes[c.ID] = r
	case "tick":
		d, err := time.ParseDuration(f[1])
		if err != nil {
			return nil, err
		}
		sc.now = sc.now.Add(d)
	case "started":
		ts := metav1.NewTime(sc.now)
		sc.pod.Status.StartTime = &ts
	case "delete":
		ts := metav1.NewTime(sc.now)
		sc.pod.DeletionTimestamp = &ts
		if g, ok := args["grace"]; ok {
			n, _ := strconv.ParseInt(g, 10, 64)
			sc.pod.DeletionGracePeriodSeconds = &n
		}
	case "remove":
		sc.removed = true
	case "restart-agent":
		sc.state = podState{}
	case "decide":
		s := decide(&sc.state, sc.input())
		return []string{describe(s)}, nil
	case "step":
		s := decide(&sc.state, sc.input())
		o := sc.carryOut(s, args)
		sc.state = advance(sc.state, s, o, sc.now)
		return []string{describe(s), "→ " + sc.describeState()}, nil
	case "status":
		return []string{describeStatus(sc.status(false))}, nil
	default:
		return nil, fmt.Errorf("unknown command %q", f[0])
	}
	return nil, nil
}

func scenarioPod(args map[string]string) *v1.Pod {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"},
		Spec:       v1.PodSpec{RestartPolicy: v1.RestartPolicy(args["policy"])},
	}
	if pod.Spec.RestartPolicy == "" {
		pod.Spec.RestartPolicy = v1.RestartPolicyAlways
	}
	always := v1.ContainerRestartPolicyAlways
	for _, n := range list(args["init"]) {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, v1.Container{Name: n, Image: "img-" + n})
	}
	for _, n := range list(args["sidecars"]) {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, v1.Container{Name: n, Image: "img-" + n, RestartPolicy: &always})
	}
	for _, n := range list(args["containers"]) {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: n, Image: "img-" + n,
			LivenessProbe: &v1.Probe{}})
	}
	for _, kv := range list(args["own"]) {
		name, policy, _ := strings.Cut(kv, ":")
		if c, _ := specContainer(pod, name, false); c != nil {
			p := v1.ContainerRestartPolicy(policy)
			c.RestartPolicy = &p
		}
	}
	for _, kv := range list(args["restart-on"]) {
		name, code, _ := strings.Cut(kv, ":")
		n, _ := strconv.ParseInt(code, 10, 32)
		if c, _ := specContainer(pod, name, false); c != nil {
			c.RestartPolicyRules = append(c.RestartPolicyRules, v1.ContainerRestartRule{Action: v1.ContainerRestartRuleActionRestart,
				ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{int32(n)}}})
		}
	}
	if d, ok := args["deadline"]; ok {
		n, _ := strconv.ParseInt(d, 10, 64)
		pod.Spec.ActiveDeadlineSeconds = &n
	}
	if g, ok := args["grace"]; ok {
		n, _ := strconv.ParseInt(g, 10, 64)
		pod.Spec.TerminationGracePeriodSeconds = &n
	}
	return pod
}

func list(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// add puts a new container of the pod's spec in the latest sandbox.
func (sc *scenario) add(name string, st runtime.ContainerState) {
	init := false
	for _, c := range sc.pod.Spec.InitContainers {
		init = init || c.Name == name
	}
	sb := sc.observed.LatestSandbox()
	restarts := int32(0)
	if prev := latestOf(sc.observed, name, init); prev != nil {
		restarts = prev.RestartCount + 1
	}
	sc.ids++
	c := &runtime.ContainerStatus{ID: fmt.Sprintf("%s-%d", name, sc.ids), Name: name, Init: init, State: st,
		RestartCount: restarts, CreatedAt: sc.now.Add(time.Duration(sc.ids) * time.Microsecond)}
	if sb != nil {
		c.SandboxID = sb.ID
	}
	if spec, _ := specContainer(sc.pod, name, init); spec != nil {
		c.Hash = runtime.ContainerHash(spec)
	}
	if st == runtime.ContainerRunning {
		c.StartedAt = sc.now
	}
	sc.observed.Containers = append(sc.observed.Containers, c)
	sc.observed.SortNewestFirst()
}

// stop stops a container as the runtime does when asked to.
func (sc *scenario) stop(c *runtime.ContainerStatus) {
	if c.State == runtime.ContainerRunning || c.State == runtime.ContainerCreated || c.State == runtime.ContainerUnknown {
		if c.State == runtime.ContainerRunning {
			c.ExitCode, c.Reason = 137, "Error"
		}
		c.State, c.FinishedAt = runtime.ContainerExited, sc.now
	}
}

func (sc *scenario) stopAll() {
	for _, c := range sc.observed.Containers {
		sc.stop(c)
	}
	for _, sb := range sc.observed.Sandboxes {
		sb.Ready = false
	}
}

// carryOut does what the worker would do for step s, in the fake runtime.
func (sc *scenario) carryOut(s step, args map[string]string) outcome {
	var o outcome
	if _, ok := args["fail"]; ok {
		o.err = fmt.Errorf("injected failure")
		return o
	}
	switch s.kind {
	case stepSync:
		p := s.plan
		if p.KillPod {
			sc.stopAll()
		}
		for _, id := range p.ContainersToKill {
			sc.stopID(id)
		}
		for _, k := range p.ProbeKills {
			sc.stopID(k.ID)
			delete(sc.probes, k.ID)
		}
		for _, id := range p.ContainersToRemove {
			sc.removeID(id)
		}
		for _, id := range p.SandboxesToStop {
			for _, sb := range sc.observed.Sandboxes {
				if sb.ID == id {
					sb.Ready = false
				}
			}
		}
		if _, ok := args["sandbox-failed"]; ok && p.CreateSandbox {
			o.sandboxFailed = true
			return o
		}
		if p.CreateSandbox {
			sc.ids++
			sc.observed.Sandboxes = append(sc.observed.Sandboxes, &runtime.SandboxStatus{ID: fmt.Sprintf("sb-%d", sc.ids),
				Attempt: p.SandboxAttempt, Ready: true, CreatedAt: sc.now.Add(time.Duration(sc.ids) * time.Microsecond)})
			sc.observed.SortNewestFirst()
		}
		if _, ok := args["cancelled"]; ok {
			return o
		}
		start := func(c *v1.Container) {
			if img := args["pull-failed"]; img != "" && img == c.Image {
				o.pullsFailed = append(o.pullsFailed, pullKey(c.Image))
				if o.waiting == nil {
					o.waiting = map[string]*status.Waiting{}
				}
				o.waiting[c.Name] = &status.Waiting{Reason: reasonErrImagePull, Message: "ErrImagePull: not found"}
				return
			}
			if _, held := s.pullsHeld[c.Image]; held {
				if o.waiting == nil {
					o.waiting = map[string]*status.Waiting{}
				}
				o.waiting[c.Name] = &status.Waiting{Reason: reasonImagePullBackOff, Message: fmt.Sprintf("Back-off pulling image %q", c.Image)}
				return
			}
			if _, failedBefore := sc.state.pulls[pullKey(c.Image)]; failedBefore {
				o.pullsDone = append(o.pullsDone, pullKey(c.Image)) // pulled this time
			}
			sc.add(c.Name, runtime.ContainerRunning)
			if o.waiting == nil {
				o.waiting = map[string]*status.Waiting{}
			}
			o.waiting[c.Name] = nil
		}
		for _, i := range p.SidecarsToStart {
			start(&sc.pod.Spec.InitContainers[i])
		}
		_, startFails := args["start-failed"]
		for _, id := range p.ContainersToStartExisting {
			for _, c := range sc.observed.Containers {
				if c.ID != id {
					continue
				}
				if o.waiting == nil {
					o.waiting = map[string]*status.Waiting{}
				}
				if startFails {
					o.startsFailed = append(o.startsFailed, id)
					o.waiting[c.Name] = &status.Waiting{Reason: reasonStartError, Message: "start failed"}
					continue
				}
				c.State, c.StartedAt = runtime.ContainerRunning, sc.now
				o.waiting[c.Name] = nil
			}
		}
		if p.NextInit >= 0 {
			start(&sc.pod.Spec.InitContainers[p.NextInit])
		} else {
			for _, i := range p.ContainersToStart {
				start(&sc.pod.Spec.Containers[i])
			}
		}
	case stepStop:
		sc.stopAll()
	case stepFinal:
		st := endStatus(sc.state.end, sc.pod, metav1.NewTime(sc.now), func() v1.PodStatus { return sc.status(true) })
		o.final = &st
	case stepCleanup:
		sc.observed.Containers, sc.observed.Sandboxes = nil, nil
	}
	return o
}

func (sc *scenario) stopID(id string) {
	for _, c := range sc.observed.Containers {
		if c.ID == id {
			sc.stop(c)
		}
	}
}

func (sc *scenario) removeID(id string) {
	var keep []*runtime.ContainerStatus
	for _, c := range sc.observed.Containers {
		if c.ID != id {
			keep = append(keep, c)
		}
	}
	sc.observed.Containers = keep
}

func (sc *scenario) status(terminal bool) v1.PodStatus {
	observed, _ := withoutAbandonedStarts(sc.observed) // as the worker reports
	return status.Compute(status.Input{Pod: sc.pod, Observed: observed, Waiting: sc.state.waiting,
		Terminal: terminal, Now: sc.now, RuntimeName: "fake"})
}

// describe prints a step as one line.
func describe(s step) string {
	var parts []string
	add := func(format string, a ...any) { parts = append(parts, fmt.Sprintf(format, a...)) }
	switch s.kind {
	case stepSync:
		p := s.plan
		if p.KillPod {
			add("kill-pod")
		}
		if p.CreateSandbox {
			add("create-sandbox(attempt=%d)", p.SandboxAttempt)
		}
		if len(p.SandboxesToStop) > 0 {
			add("stop-sandboxes=%s", strings.Join(p.SandboxesToStop, ","))
		}
		if len(p.ContainersToKill) > 0 {
			add("replace=%s", strings.Join(p.ContainersToKill, ","))
		}
		for _, k := range p.ProbeKills {
			add("probe-kill=%s(%q)", k.ID, k.Message)
		}
		if len(p.ContainersToRemove) > 0 {
			add("remove=%s", strings.Join(p.ContainersToRemove, ","))
		}
		if p.NextInit >= 0 {
			add("start-init=%d", p.NextInit)
		}
		if len(p.SidecarsToStart) > 0 {
			add("restart-sidecars=%v", p.SidecarsToStart)
		}
		if len(p.ContainersToStartExisting) > 0 {
			add("start-existing=%s", strings.Join(p.ContainersToStartExisting, ","))
		}
		if p.NextInit < 0 && len(p.ContainersToStart) > 0 {
			add("start=%v", p.ContainersToStart)
		}
		for _, h := range s.holds {
			add("hold=%s(%s: %s)", h.name, h.waiting.Reason, h.waiting.Message)
		}
		var held []string
		for img, d := range s.pullsHeld {
			held = append(held, fmt.Sprintf("%s:%s", img, d))
		}
		sort.Strings(held)
		if len(held) > 0 {
			add("pulls-held=%s", strings.Join(held, ","))
		}
		add("wait=%s", s.wait)
	case stepStop:
		add("grace=%d", s.grace)
		if e := s.begin; e != nil {
			add("ending=%s", describeEnding(*e))
		}
	case stepFinal:
		add("write=%t", s.write)
	case stepIdle:
		add("wait=%s", s.wait)
	}
	if len(parts) == 0 {
		return s.kind.String()
	}
	return s.kind.String() + ": " + strings.Join(parts, " ")
}

func describeEnding(e ending) string {
	var parts []string
	switch {
	case e.rejected:
		parts = append(parts, "rejected")
	case e.quiet:
		parts = append(parts, "quiet")
	default:
		parts = append(parts, "ended")
	}
	if e.reason != "" {
		parts = append(parts, e.reason)
	}
	return strings.Join(parts, "/")
}

func (sc *scenario) describeState() string {
	st := sc.state
	out := st.phase.String()
	if st.phase != phaseSyncing {
		out += " (" + describeEnding(st.end) + ")"
	}
	if st.final != nil {
		out += " final[" + describeStatus(*st.final) + "]"
		if st.finalWritten {
			out += " written"
		}
	}
	if st.confirmed {
		out += " confirmed"
	}
	if st.released {
		out += " released"
	}
	if st.sandboxRetry.After(sc.now) {
		out += fmt.Sprintf(" sandbox-retry-in=%s", st.sandboxRetry.Sub(sc.now))
	}
	var names []string
	for name := range st.waiting {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, n := range names {
		out += fmt.Sprintf(" %s:%s", n, st.waiting[n].Reason)
	}
	var keys []string
	for k := range st.restarts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out += fmt.Sprintf(" backoff[%s]=%s", strings.TrimPrefix(k, "uid-1/"), st.restarts[k].delay)
	}
	keys = keys[:0]
	for k := range st.pulls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out += fmt.Sprintf(" pull-backoff[%s]=%s", strings.TrimPrefix(k, "image/"), st.pulls[k].delay)
	}
	return out
}

// describeStatus prints the phase, reason and each container's state.
func describeStatus(st v1.PodStatus) string {
	out := string(st.Phase)
	if st.Reason != "" {
		out += "/" + st.Reason
	}
	one := func(cs v1.ContainerStatus) string {
		s := cs.Name + "="
		switch {
		case cs.State.Running != nil:
			s += "running"
		case cs.State.Terminated != nil:
			s += fmt.Sprintf("terminated(%d)", cs.State.Terminated.ExitCode)
		case cs.State.Waiting != nil:
			s += "waiting(" + cs.State.Waiting.Reason + ")"
		}
		if cs.RestartCount > 0 {
			s += fmt.Sprintf("#%d", cs.RestartCount)
		}
		return s
	}
	for _, cs := range st.InitContainerStatuses {
		out += " init:" + one(cs)
	}
	for _, cs := range st.ContainerStatuses {
		out += " " + one(cs)
	}
	return out
}
