package eviction

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Signal names a measured resource, as the kubelet's configuration does.
type Signal string

// The kubelet's eviction signals.
const (
	// SignalMemoryAvailable is the node's memory capacity less the working
	// set of the root cgroup (usage less inactive file pages).
	SignalMemoryAvailable Signal = "memory.available"
	// SignalAllocatableMemoryAvailable is what the kubepods cgroup may
	// still take before its working set reaches its limit. It is not
	// configured: it follows memory.available's hard threshold when node
	// allocatable is enforced on pods.
	SignalAllocatableMemoryAvailable Signal = "allocatableMemory.available"
	// SignalNodeFsAvailable and SignalNodeFsInodesFree: the filesystem of
	// the agent's root directory (volumes, logs).
	SignalNodeFsAvailable  Signal = "nodefs.available"
	SignalNodeFsInodesFree Signal = "nodefs.inodesFree"
	// SignalImageFsAvailable and SignalImageFsInodesFree: the filesystem
	// the runtime keeps its images on.
	SignalImageFsAvailable  Signal = "imagefs.available"
	SignalImageFsInodesFree Signal = "imagefs.inodesFree"
	// SignalContainerFsAvailable and SignalContainerFsInodesFree: the
	// filesystem of the containers' writable layers. Their thresholds are
	// never configured: they are those of nodefs or imagefs, whichever
	// filesystem holds the writable layers.
	SignalContainerFsAvailable  Signal = "containerfs.available"
	SignalContainerFsInodesFree Signal = "containerfs.inodesFree"
	// SignalPIDAvailable is the kernel's process limit less the processes
	// running.
	SignalPIDAvailable Signal = "pid.available"
)

// DefaultEvictionHard is the kubelet's evictionHard on Linux when the
// configuration sets none.
func DefaultEvictionHard() map[string]string {
	return map[string]string{
		string(SignalMemoryAvailable):   "100Mi",
		string(SignalNodeFsAvailable):   "10%",
		string(SignalNodeFsInodesFree):  "5%",
		string(SignalImageFsAvailable):  "15%",
		string(SignalImageFsInodesFree): "5%",
	}
}

// Value is an amount a threshold names: a quantity, or a share of the
// signal's capacity when Quantity is nil.
type Value struct {
	Quantity *resource.Quantity
	// Percentage is a fraction, 0 < p <= 1.
	Percentage float64
}

// of is the amount for a signal whose capacity is capacity.
func (v Value) of(capacity int64) int64 {
	if v.Quantity != nil {
		return v.Quantity.Value()
	}
	return int64(float64(capacity) * v.Percentage)
}

func (v Value) String() string {
	if v.Quantity != nil {
		return v.Quantity.String()
	}
	return strconv.FormatFloat(v.Percentage*100, 'f', -1, 64) + "%"
}

// Threshold is one eviction threshold: the signal is met when less than
// Value is available.
type Threshold struct {
	Signal Signal
	Value  Value
	// GracePeriod is how long the signal must stay met before pods are
	// evicted; zero makes the threshold hard.
	GracePeriod time.Duration
	// MinReclaim is how much beyond Value eviction reclaims before the
	// threshold counts as resolved; nil is nothing beyond.
	MinReclaim *Value
}

// Hard says whether the threshold evicts at once.
func (t Threshold) Hard() bool { return t.GracePeriod == 0 }

// key identifies a threshold: each signal has at most one hard and one
// soft threshold.
type key struct {
	signal Signal
	soft   bool
}

func (t Threshold) key() key { return key{t.Signal, !t.Hard()} }

func (t Threshold) String() string {
	s := fmt.Sprintf("%s<%s", t.Signal, t.Value)
	if !t.Hard() {
		s += fmt.Sprintf(" for %s", t.GracePeriod)
	}
	return s
}

// Settings are the eviction fields of the KubeletConfiguration, as the
// file spells them.
type Settings struct {
	// Hard, Soft, SoftGracePeriod and MinimumReclaim are evictionHard,
	// evictionSoft, evictionSoftGracePeriod and evictionMinimumReclaim.
	Hard, Soft, SoftGracePeriod, MinimumReclaim map[string]string
	// EnforcePodsAllocatable: enforceNodeAllocatable has "pods", so
	// memory.available's hard threshold also guards the kubepods cgroup.
	EnforcePodsAllocatable bool
}

// configurable are the signals a configuration may name.
var configurable = []Signal{
	SignalMemoryAvailable, SignalNodeFsAvailable, SignalNodeFsInodesFree,
	SignalImageFsAvailable, SignalImageFsInodesFree,
	SignalContainerFsAvailable, SignalContainerFsInodesFree, SignalPIDAvailable,
	SignalAllocatableMemoryAvailable,
}

func parseSignal(field, name string) (Signal, error) {
	s := Signal(name)
	if !slices.Contains(configurable, s) {
		return "", fmt.Errorf("%s: unsupported eviction signal %q", field, name)
	}
	return s, nil
}

// ParseThresholds turns the configuration into thresholds, with the
// kubelet's rules: "0%" and "100%" are ignored, a quantity must be
// positive, every soft threshold needs a grace period, minimum reclaims
// apply to the hard and soft thresholds of their signal. The result is
// ordered: hard thresholds, then soft ones, each by signal.
func ParseThresholds(s Settings) ([]Threshold, error) {
	hard, err := parseStatements("evictionHard", s.Hard)
	if err != nil {
		return nil, err
	}
	soft, err := parseStatements("evictionSoft", s.Soft)
	if err != nil {
		return nil, err
	}
	graces := map[Signal]time.Duration{}
	for _, name := range sortedKeys(s.SoftGracePeriod) {
		sig, err := parseSignal("evictionSoftGracePeriod", name)
		if err != nil {
			return nil, err
		}
		d, err := time.ParseDuration(strings.TrimSpace(s.SoftGracePeriod[name]))
		if err != nil {
			return nil, fmt.Errorf("evictionSoftGracePeriod[%s]: %w", name, err)
		}
		if d < 0 {
			return nil, fmt.Errorf("evictionSoftGracePeriod[%s]: must not be negative, got %s", name, d)
		}
		graces[sig] = d
	}
	for i := range soft {
		d, ok := graces[soft[i].Signal]
		if !ok {
			return nil, fmt.Errorf("evictionSoftGracePeriod: a grace period is required for the soft eviction threshold %s", soft[i].Signal)
		}
		soft[i].GracePeriod = d
	}
	reclaims := map[Signal]Value{}
	for _, name := range sortedKeys(s.MinimumReclaim) {
		sig, err := parseSignal("evictionMinimumReclaim", name)
		if err != nil {
			return nil, err
		}
		v, err := parseValue(strings.TrimSpace(s.MinimumReclaim[name]))
		if err != nil {
			return nil, fmt.Errorf("evictionMinimumReclaim[%s]: %w", name, err)
		}
		if v.Quantity == nil && v.Percentage <= 0 {
			return nil, fmt.Errorf("evictionMinimumReclaim[%s]: a percentage must be positive", name)
		}
		if v.Quantity != nil && v.Quantity.Sign() < 0 {
			return nil, fmt.Errorf("evictionMinimumReclaim[%s]: must not be negative", name)
		}
		reclaims[sig] = v
	}
	out := append(slices.Clip(hard), soft...)
	for i := range out {
		if v, ok := reclaims[out[i].Signal]; ok {
			out[i].MinReclaim = &v
		}
	}
	if s.EnforcePodsAllocatable {
		for _, t := range out[:len(hard)] {
			if t.Signal == SignalMemoryAvailable {
				out = append(out, Threshold{Signal: SignalAllocatableMemoryAvailable, Value: t.Value, MinReclaim: t.MinReclaim})
			}
		}
	}
	return out, nil
}

func parseStatements(field string, in map[string]string) ([]Threshold, error) {
	var out []Threshold
	for _, name := range sortedKeys(in) {
		sig, err := parseSignal(field, name)
		if err != nil {
			return nil, err
		}
		val := strings.TrimSpace(in[name])
		if val == "0%" || val == "100%" {
			continue // the kubelet ignores both
		}
		v, err := parseValue(val)
		if err != nil {
			return nil, fmt.Errorf("%s[%s]: %w", field, name, err)
		}
		if v.Quantity != nil && v.Quantity.Sign() <= 0 {
			return nil, fmt.Errorf("%s[%s]: the threshold must be positive, got %s", field, name, val)
		}
		out = append(out, Threshold{Signal: sig, Value: v})
	}
	return out, nil
}

// parseValue reads "100Mi" or "10%".
func parseValue(val string) (Value, error) {
	if p, ok := strings.CutSuffix(val, "%"); ok {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || math.IsNaN(f) {
			return Value{}, fmt.Errorf("invalid percentage %q", val)
		}
		if f < 0 || f > 100 {
			return Value{}, fmt.Errorf("percentage %q must be between 0%% and 100%%", val)
		}
		return Value{Percentage: f / 100}, nil
	}
	q, err := resource.ParseQuantity(val)
	if err != nil {
		return Value{}, fmt.Errorf("invalid quantity %q: %w", val, err)
	}
	return Value{Quantity: &q}, nil
}

// DiskLayout says which filesystems the runtime keeps apart from the
// agent's root directory.
type DiskLayout struct {
	// DedicatedImageFs: the images are on another filesystem than the
	// root directory.
	DedicatedImageFs bool
	// SplitContainerFs: the containers' writable layers are on another
	// filesystem than the images.
	SplitContainerFs bool
}

// containerFsSource is the signal whose filesystem holds the writable
// layers, as the kubelet reckons it: the image filesystem when it is
// dedicated and holds the layers too, else the node's.
func (l DiskLayout) containerFsSource(bytes bool) Signal {
	if l.DedicatedImageFs && !l.SplitContainerFs {
		if bytes {
			return SignalImageFsAvailable
		}
		return SignalImageFsInodesFree
	}
	if bytes {
		return SignalNodeFsAvailable
	}
	return SignalNodeFsInodesFree
}

// withContainerFs replaces any configured containerfs thresholds with
// copies of those of the filesystem that holds the writable layers, as
// the kubelet does; it says whether configured ones were dropped.
func withContainerFs(in []Threshold, layout DiskLayout) ([]Threshold, bool) {
	dropped := false
	out := make([]Threshold, 0, len(in)+4)
	for _, t := range in {
		if t.Signal == SignalContainerFsAvailable || t.Signal == SignalContainerFsInodesFree {
			dropped = true
			continue
		}
		out = append(out, t)
	}
	derived := map[Signal]Signal{
		layout.containerFsSource(true):  SignalContainerFsAvailable,
		layout.containerFsSource(false): SignalContainerFsInodesFree,
	}
	for _, t := range slices.Clone(out) {
		if to, ok := derived[t.Signal]; ok {
			t.Signal = to
			out = append(out, t)
		}
	}
	return out, dropped
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
