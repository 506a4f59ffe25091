package cgroups

import occgroups "github.com/opencontainers/cgroups"

// HostUnified says whether the host's cgroups are a cgroup v2 hierarchy.
func HostUnified() bool { return occgroups.IsCgroup2UnifiedMode() }

// HostHugePageSizes lists the host's huge page sizes as cgroups name them
// ("2MB", "1GB").
func HostHugePageSizes() []string { return occgroups.HugePageSizes() }
