package eviction

import (
	"strings"
	"testing"
)

// describe shows thresholds one a line, in their order.
func describe(ts []Threshold) string {
	var out []string
	for _, t := range ts {
		s := t.String()
		if t.MinReclaim != nil {
			s += " reclaim " + t.MinReclaim.String()
		}
		out = append(out, s)
	}
	return strings.Join(out, "\n")
}

func TestParseThresholds(t *testing.T) {
	tests := []struct {
		name    string
		in      Settings
		want    string
		wantErr string
	}{
		{name: "the kubelet's defaults", in: Settings{Hard: DefaultEvictionHard()},
			want: "imagefs.available<15%\nimagefs.inodesFree<5%\nmemory.available<100Mi\nnodefs.available<10%\nnodefs.inodesFree<5%"},
		{name: "0% and 100% are ignored", in: Settings{Hard: map[string]string{"nodefs.available": "0%", "imagefs.available": "100%", "pid.available": "1k"}},
			want: "pid.available<1k"},
		{name: "soft thresholds with their grace periods, after the hard ones", in: Settings{
			Hard:            map[string]string{"memory.available": "100Mi"},
			Soft:            map[string]string{"memory.available": "300Mi", "nodefs.available": "20%"},
			SoftGracePeriod: map[string]string{"memory.available": "1m30s", "nodefs.available": "2m"},
		}, want: "memory.available<100Mi\nmemory.available<300Mi for 1m30s\nnodefs.available<20% for 2m0s"},
		{name: "minimum reclaims apply to hard and soft", in: Settings{
			Hard:            map[string]string{"nodefs.available": "1Gi"},
			Soft:            map[string]string{"nodefs.available": "2Gi"},
			SoftGracePeriod: map[string]string{"nodefs.available": "10s"},
			MinimumReclaim:  map[string]string{"nodefs.available": "500Mi"},
		}, want: "nodefs.available<1Gi reclaim 500Mi\nnodefs.available<2Gi for 10s reclaim 500Mi"},
		{name: "enforced pods allocatable guards the kubepods cgroup", in: Settings{
			Hard: map[string]string{"memory.available": "100Mi"}, MinimumReclaim: map[string]string{"memory.available": "5%"}, EnforcePodsAllocatable: true,
		}, want: "memory.available<100Mi reclaim 5%\nallocatableMemory.available<100Mi reclaim 5%"},
		{name: "unknown signal", in: Settings{Hard: map[string]string{"cpu.available": "1"}}, wantErr: `unsupported eviction signal "cpu.available"`},
		{name: "zero quantity", in: Settings{Hard: map[string]string{"memory.available": "0"}}, wantErr: "must be positive"},
		{name: "negative quantity", in: Settings{Hard: map[string]string{"memory.available": "-1Mi"}}, wantErr: "must be positive"},
		{name: "percentage over 100", in: Settings{Hard: map[string]string{"nodefs.available": "101%"}}, wantErr: "between 0% and 100%"},
		{name: "garbage", in: Settings{Hard: map[string]string{"nodefs.available": "lots"}}, wantErr: "invalid quantity"},
		{name: "soft without grace period", in: Settings{Soft: map[string]string{"memory.available": "1Gi"}}, wantErr: "grace period is required"},
		{name: "negative grace period", in: Settings{Soft: map[string]string{"memory.available": "1Gi"}, SoftGracePeriod: map[string]string{"memory.available": "-1s"}},
			wantErr: "must not be negative"},
		{name: "zero minimum reclaim percentage", in: Settings{Hard: map[string]string{"memory.available": "1Gi"}, MinimumReclaim: map[string]string{"memory.available": "0%"}},
			wantErr: "must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseThresholds(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := describe(got); d != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", d, tt.want)
			}
		})
	}
}

func TestWithContainerFs(t *testing.T) {
	base, err := ParseThresholds(Settings{
		Hard:            map[string]string{"nodefs.available": "10%", "imagefs.available": "15%", "nodefs.inodesFree": "5%", "imagefs.inodesFree": "4%"},
		Soft:            map[string]string{"nodefs.available": "20%"},
		SoftGracePeriod: map[string]string{"nodefs.available": "1m"},
	})
	if err != nil {
		t.Fatal(err)
	}
	derived := func(ts []Threshold) string {
		var out []string
		for _, t := range ts {
			if strings.HasPrefix(string(t.Signal), "containerfs.") {
				out = append(out, t.String())
			}
		}
		return strings.Join(out, "\n")
	}
	tests := []struct {
		name   string
		layout DiskLayout
		want   string
	}{
		{name: "one filesystem: nodefs's", want: "containerfs.available<10%\ncontainerfs.inodesFree<5%\ncontainerfs.available<20% for 1m0s"},
		{name: "dedicated imagefs: imagefs's", layout: DiskLayout{DedicatedImageFs: true},
			want: "containerfs.available<15%\ncontainerfs.inodesFree<4%"},
		{name: "split container fs: nodefs's", layout: DiskLayout{DedicatedImageFs: true, SplitContainerFs: true},
			want: "containerfs.available<10%\ncontainerfs.inodesFree<5%\ncontainerfs.available<20% for 1m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			configured := append(append([]Threshold(nil), base...), Threshold{Signal: SignalContainerFsAvailable, Value: Value{Percentage: 0.5}})
			got, dropped := withContainerFs(configured, tt.layout)
			if !dropped {
				t.Error("a configured containerfs threshold was kept")
			}
			if d := derived(got); d != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", d, tt.want)
			}
			if len(got)-len(base) != strings.Count(tt.want, "\n")+1 {
				t.Errorf("thresholds = %d, want the %d configured plus the derived", len(got), len(base))
			}
		})
	}
}
