package qos

import "time"

// CFS bounds, as the kernel defines them.
const (
	// MinShares and MaxShares bound cpu.shares.
	MinShares = 2
	MaxShares = 262144
	// SharesPerCPU is the weight of one whole cpu.
	SharesPerCPU = 1024
	// DefaultQuotaPeriod is the CFS period in microseconds (100ms).
	DefaultQuotaPeriod = 100000
	// MinQuota is the smallest quota the kernel accepts (1ms).
	MinQuota = 1000
)

// MilliCPUToShares converts a cpu request in millicores to cpu.shares.
// No request gets the minimum, so that a pod without one yields to every
// pod with one.
func MilliCPUToShares(milliCPU int64) uint64 {
	if milliCPU <= 0 {
		return MinShares
	}
	shares := milliCPU * SharesPerCPU / 1000
	return uint64(min(max(shares, MinShares), MaxShares))
}

// MilliCPUToQuota converts a cpu limit in millicores to a CFS quota over
// period (microseconds). No limit is zero, which callers leave unset.
func MilliCPUToQuota(milliCPU, period int64) int64 {
	if milliCPU <= 0 {
		return 0
	}
	return max(milliCPU*period/1000, MinQuota)
}

// PeriodMicros converts cpuCFSQuotaPeriod to microseconds; zero is the
// default period.
func PeriodMicros(d time.Duration) int64 {
	if d <= 0 {
		return DefaultQuotaPeriod
	}
	return int64(d / time.Microsecond)
}
