package stats

import (
	"context"
	"testing"
	"time"
)

// BenchmarkNodeSummary is the eviction manager's pass every 10 s: the node's signals from
// the root cgroup, the pods' cgroup, /proc, the filesystems' statfs, and the runtime's
// filesystems (asked once a minute).
func BenchmarkNodeSummary(b *testing.B) {
	f := newFixture(b, false)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.provider.NodeSummary(ctx); err != nil {
			b.Fatal(err)
		}
		f.clock.Step(10 * time.Second)
	}
}
