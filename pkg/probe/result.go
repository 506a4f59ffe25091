// Package probe runs containers' liveness, readiness and startup probes and
// their lifecycle hooks (postStart, preStop) with the kubelet's handlers:
// exec (CRI ExecSync), httpGet, tcpSocket, grpc and sleep.
//
// One goroutine per probe of each running container keeps its result; a
// result that changes wakes the pod's worker, which reads the results when
// it decides what to kill and what status to report.
package probe

// Kind is which of a container's probes.
type Kind int

// The three kinds of probes.
const (
	Liveness Kind = iota
	Readiness
	Startup
)

// String names the kind as events spell it ("Liveness probe failed: …").
func (k Kind) String() string {
	switch k {
	case Liveness:
		return "Liveness"
	case Readiness:
		return "Readiness"
	case Startup:
		return "Startup"
	}
	return "Unknown"
}

// Result is what a probe says of a container once its thresholds are met.
type Result int

// Results of a probe. Unknown means no verdict yet (or no such probe).
const (
	Unknown Result = iota
	Success
	Failure
)

func (r Result) String() string {
	switch r {
	case Success:
		return "success"
	case Failure:
		return "failure"
	}
	return "unknown"
}

// initialResult is what a probe says of a new container before it has run:
// a container is alive until shown otherwise, not ready until shown ready,
// and not started until its startup probe says so.
func initialResult(k Kind) Result {
	switch k {
	case Liveness:
		return Success
	case Readiness:
		return Failure
	}
	return Unknown
}

// Results is what the probes say of one container. A kind the container
// has no probe of is Unknown.
type Results struct {
	Liveness, Readiness, Startup Result
}

func (r *Results) set(k Kind, v Result) {
	switch k {
	case Liveness:
		r.Liveness = v
	case Readiness:
		r.Readiness = v
	case Startup:
		r.Startup = v
	}
}

func (r Results) get(k Kind) Result {
	switch k {
	case Liveness:
		return r.Liveness
	case Readiness:
		return r.Readiness
	}
	return r.Startup
}
