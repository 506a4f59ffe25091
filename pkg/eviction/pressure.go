package eviction

import (
	"slices"
	gosync "sync"

	v1 "k8s.io/api/core/v1"
)

// Pressure holds the node's pressure conditions (MemoryPressure,
// DiskPressure, PIDPressure) as the manager last decided them, for the
// node status and admission to read. The manager is its one writer. It is
// made before the manager, since those readers are built before what the
// manager needs (the pods to evict); the zero value is no pressure.
type Pressure struct {
	mu    gosync.RWMutex
	conds []v1.NodeConditionType
}

// Conditions are the conditions the node has now, in the kubelet's order
// (memory, disk, PID); nil when it has none.
func (p *Pressure) Conditions() []v1.NodeConditionType {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return slices.Clone(p.conds)
}

// Has says whether the node has the condition now.
func (p *Pressure) Has(c v1.NodeConditionType) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return slices.Contains(p.conds, c)
}

func (p *Pressure) set(conds []v1.NodeConditionType) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conds = slices.Clone(conds)
}
