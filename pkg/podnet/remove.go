package podnet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"
)

// HasState reports whether the pod network left a record under rootDir:
// only then does an agent with the setting off have anything to remove.
func HasState(rootDir string) bool {
	_, err := os.Stat(filepath.Join(rootDir, StateFileName))
	return err == nil
}

// Remove takes away what the pod network recorded under rootDir: its CNI
// configuration file (only while it is still the agent's network), every
// route with the agent's protocol, its iptables rules, the bridge,
// host-local's allocations and last the record itself. Without a record it
// does nothing at all. It may be called again after a failure.
func Remove(ctx context.Context, rootDir string, kernel Kernel) error {
	if kernel == nil {
		kernel = HostKernel{}
	}
	statePath := filepath.Join(rootDir, StateFileName)
	st, err := readState(statePath)
	if err != nil || st == nil {
		return err
	}
	logger := klog.FromContext(ctx)
	var errs []error
	if st.Conflist != "" {
		if err := removeConflist(st.Conflist); err != nil {
			errs = append(errs, err)
		}
	}
	if err := kernel.Routes().DeleteAllOurs(); err != nil {
		errs = append(errs, err)
	}
	tables := map[bool]RuleTable{}
	for _, r := range st.Rules {
		t, ok := tables[r.IPv6]
		if !ok {
			if t, err = kernel.Rules(r.IPv6); err != nil {
				errs = append(errs, err)
				continue
			}
			tables[r.IPv6] = t
		}
		if err := t.DeleteIfExists(r.Table, r.Chain, r.Spec...); err != nil {
			errs = append(errs, fmt.Errorf("delete rule %s %s %v: %w", r.Table, r.Chain, r.Spec, err))
		}
	}
	if st.Bridge != "" {
		if err := kernel.DeleteBridge(st.Bridge); err != nil {
			errs = append(errs, err)
		}
	}
	if st.IPAMDataDir != "" {
		if err := os.RemoveAll(st.IPAMDataDir); err != nil {
			errs = append(errs, fmt.Errorf("remove IPAM data: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove the pod network: %w", err)
	}
	if err := os.Remove(statePath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	logger.Info("Removed the pod network (--pod-network is off)", "conflist", st.Conflist, "bridge", st.Bridge)
	return nil
}

// removeConflist removes the file if it still holds the agent's network.
func removeConflist(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !isOurConflist(b) {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove CNI configuration: %w", err)
	}
	return nil
}

// RunRemove calls Remove until it succeeds or ctx ends, with back-off; its
// failures are logged, never returned, so the agent runs on regardless.
func RunRemove(ctx context.Context, rootDir string, kernel Kernel) error {
	logger := klog.FromContext(ctx).WithName("podnet")
	ctx = klog.NewContext(ctx, logger)
	retry := retryInitial
	for {
		err := Remove(ctx, rootDir, kernel)
		if err == nil {
			return nil
		}
		logger.Error(err, "Removing the pod network failed; retrying", "retryIn", retry)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retry):
		}
		retry = min(retry*2, defaultResyncPeriod)
	}
}
