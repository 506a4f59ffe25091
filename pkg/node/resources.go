package node

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Eviction signals that reserve capacity from allocatable.
const (
	signalMemoryAvailable = "memory.available"
	signalNodeFSAvailable = "nodefs.available"
)

// Threshold is one eviction threshold: an absolute quantity or a
// percentage of capacity.
type Threshold struct {
	Quantity   *resource.Quantity
	Percentage float64 // 0 < p <= 1 when Quantity is nil
}

// ParseThresholds parses an evictionHard-style map ("100Mi", "10%").
// field names the config field in errors.
func ParseThresholds(field string, in map[string]string) (map[string]Threshold, error) {
	out := make(map[string]Threshold, len(in))
	for _, signal := range sortedKeys(in) {
		value := strings.TrimSpace(in[signal])
		if p, ok := strings.CutSuffix(value, "%"); ok {
			f, err := strconv.ParseFloat(p, 64)
			if err != nil || f < 0 || f > 100 || math.IsNaN(f) {
				return nil, fmt.Errorf("%s[%s]: invalid percentage %q", field, signal, value)
			}
			out[signal] = Threshold{Percentage: f / 100}
			continue
		}
		q, err := resource.ParseQuantity(value)
		if err != nil {
			return nil, fmt.Errorf("%s[%s]: invalid quantity %q: %w", field, signal, value, err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("%s[%s]: must not be negative", field, signal)
		}
		out[signal] = Threshold{Quantity: &q}
	}
	return out, nil
}

// ParseReserved parses a kubeReserved/systemReserved map into a ResourceList.
func ParseReserved(field string, in map[string]string) (v1.ResourceList, error) {
	out := v1.ResourceList{}
	for _, name := range sortedKeys(in) {
		switch v1.ResourceName(name) {
		case v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage, "pid":
		default:
			return nil, fmt.Errorf("%s[%s]: unsupported resource, want cpu, memory, ephemeral-storage or pid", field, name)
		}
		q, err := resource.ParseQuantity(in[name])
		if err != nil {
			return nil, fmt.Errorf("%s[%s]: invalid quantity %q: %w", field, name, in[name], err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("%s[%s]: must not be negative", field, name)
		}
		out[v1.ResourceName(name)] = q
	}
	return out, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// capacity builds the node's capacity from the machine facts.
func capacity(m Machine, maxPods int32) v1.ResourceList {
	c := v1.ResourceList{
		v1.ResourceCPU:    *resource.NewQuantity(int64(m.NumCPU), resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(m.MemoryBytes, resource.BinarySI),
		v1.ResourcePods:   *resource.NewQuantity(int64(maxPods), resource.DecimalSI),
	}
	if m.EphemeralStorageBytes > 0 {
		// The kubelet reports the filesystem size in plain bytes.
		c[v1.ResourceEphemeralStorage] = *resource.NewQuantity(m.EphemeralStorageBytes, resource.DecimalSI)
	}
	for size, bytes := range m.HugePages {
		c[v1.ResourceName(v1.ResourceHugePagesPrefix+size)] = *resource.NewQuantity(bytes, resource.BinarySI)
	}
	return c
}

// allocatable is capacity minus kube and system reservations and the hard
// eviction thresholds, with pre-allocated huge pages taken from memory.
// Nothing goes below zero.
func allocatable(capacity, kubeReserved, systemReserved v1.ResourceList, evictionHard map[string]Threshold) v1.ResourceList {
	reserved := v1.ResourceList{}
	add := func(name v1.ResourceName, q resource.Quantity) {
		sum := reserved[name]
		sum.Add(q)
		reserved[name] = sum
	}
	for _, list := range []v1.ResourceList{kubeReserved, systemReserved} {
		for name, q := range list {
			add(name, q)
		}
	}
	for signal, res := range map[string]v1.ResourceName{signalMemoryAvailable: v1.ResourceMemory, signalNodeFSAvailable: v1.ResourceEphemeralStorage} {
		t, ok := evictionHard[signal]
		if !ok {
			continue
		}
		if t.Quantity != nil {
			add(res, *t.Quantity)
			continue
		}
		c := capacity[res]
		// The kubelet holds percentages as float32; computing with that precision gives
		// the same allocatable to the byte (10% of 270553174016 is 27055317804 there).
		add(res, *resource.NewQuantity(int64(float64(float32(t.Percentage))*float64(c.Value())), resource.BinarySI))
	}

	out := v1.ResourceList{}
	for name, c := range capacity {
		a := c.DeepCopy()
		if r, ok := reserved[name]; ok {
			a.Sub(r)
		}
		if a.Sign() < 0 {
			a.Set(0)
		}
		out[name] = a
	}
	mem := out[v1.ResourceMemory]
	for name, c := range capacity {
		if strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix) {
			mem.Sub(c)
		}
	}
	if mem.Sign() < 0 {
		mem.Set(0)
	}
	out[v1.ResourceMemory] = mem
	return out
}

// Capacity is the node's capacity as it reports it: the machine's cpus,
// memory, huge pages and root filesystem, and maxPods pods.
func Capacity(m Machine, maxPods int32) v1.ResourceList { return capacity(m, maxPods) }

// Allocatable is what pods may use of capacity: capacity less the kube
// and system reservations and the hard eviction thresholds, as the node
// reports it and admission counts it.
func Allocatable(capacity, kubeReserved, systemReserved v1.ResourceList, evictionHard map[string]Threshold) v1.ResourceList {
	return allocatable(capacity, kubeReserved, systemReserved, evictionHard)
}
