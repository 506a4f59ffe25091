package csi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Watcher is the kubelet's plugin watcher for CSI drivers: it watches the
// plugin registration directory (<root-dir>/plugins_registry) for sockets,
// runs the registration handshake with each (GetInfo, then
// NotifyRegistrationStatus) and registers the CSI drivers they announce; a
// socket that goes away deregisters its driver, and one that comes back
// (the driver restarted) registers it again. A failed registration is
// retried with back-off while its socket exists.
type Watcher struct {
	Dir      string
	Registry *Registry
}

// handshakeTimeout bounds each call to a registration socket.
const handshakeTimeout = 10 * time.Second

// Retry back-off of a failed registration, as the kubelet's operation
// executor: from half a second, doubling, up to about two minutes.
const (
	retryInitial = 500 * time.Millisecond
	retryMax     = 2*time.Minute + 2*time.Second
)

// socketState is what the watcher knows of one registration socket.
type socketState struct {
	driver   string // registered under this name; "" when not (yet)
	endpoint string
	modTime  time.Time
	retryAt  time.Time
	backoff  time.Duration
}

// Run watches until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	log := klog.FromContext(ctx).WithName("pluginwatcher")
	ctx = klog.NewContext(ctx, log)
	if err := os.MkdirAll(w.Dir, 0o750); err != nil {
		return fmt.Errorf("plugin watcher: %w", err)
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("plugin watcher: %w", err)
	}
	defer fw.Close()
	if err := w.watchTree(fw, w.Dir); err != nil {
		return fmt.Errorf("plugin watcher: %w", err)
	}
	log.Info("Watching for plugins", "dir", w.Dir)

	sockets := map[string]*socketState{}
	// Every event leads to a rescan of the tree: the scan, not the event,
	// says what exists, so a lost or coalesced event costs nothing.
	tick := time.NewTimer(0)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return errors.New("plugin watcher: fsnotify closed")
			}
			if ev.Has(fsnotify.Create) {
				if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
					_ = w.watchTree(fw, ev.Name)
				}
			}
		case err, ok := <-fw.Errors:
			if !ok {
				return errors.New("plugin watcher: fsnotify closed")
			}
			log.Error(err, "Plugin watcher error")
		case <-tick.C:
		}
		next := w.reconcile(ctx, sockets)
		if !tick.Stop() {
			select {
			case <-tick.C:
			default:
			}
		}
		if !next.IsZero() {
			tick.Reset(time.Until(next))
		}
	}
}

// watchTree adds dir and its subdirectories to the watch; dot entries are
// ignored as the kubelet ignores them.
func (w *Watcher) watchTree(fw *fsnotify.Watcher, dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return err
			}
			return nil
		}
		if d.IsDir() {
			if path != dir && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return fw.Add(path)
		}
		return nil
	})
}

// scan lists the sockets below the registration directory with their
// modification times.
func (w *Watcher) scan() map[string]time.Time {
	found := map[string]time.Time{}
	_ = filepath.WalkDir(w.Dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") && path != w.Dir {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type()&fs.ModeSocket == 0 {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			found[path] = fi.ModTime()
		}
		return nil
	})
	return found
}

// reconcile registers new and recreated sockets, retries failed ones that
// are due and deregisters those that went away. It returns when it next
// needs to run (zero: only on an event).
func (w *Watcher) reconcile(ctx context.Context, sockets map[string]*socketState) time.Time {
	now := time.Now()
	found := w.scan()
	for path, st := range sockets {
		if mt, ok := found[path]; ok && mt.Equal(st.modTime) {
			continue
		}
		// Gone, or a new socket at the same path: the old registration ends.
		if st.driver != "" {
			if err := w.Registry.Deregister(ctx, st.driver, st.endpoint); err != nil {
				klog.FromContext(ctx).Error(err, "Deregistering CSI driver", "driver", st.driver)
			}
		}
		delete(sockets, path)
	}
	var next time.Time
	for path, mt := range found {
		st, ok := sockets[path]
		if !ok {
			st = &socketState{modTime: mt}
			sockets[path] = st
		}
		if st.driver != "" {
			continue
		}
		if now.Before(st.retryAt) {
			if next.IsZero() || st.retryAt.Before(next) {
				next = st.retryAt
			}
			continue
		}
		name, endpoint, err := w.register(ctx, path)
		if err == nil {
			st.driver, st.endpoint = name, endpoint
			continue
		}
		klog.FromContext(ctx).Error(err, "Plugin registration failed, will retry", "socket", path)
		st.backoff = min(max(2*st.backoff, retryInitial), retryMax)
		st.retryAt = now.Add(st.backoff)
		if next.IsZero() || st.retryAt.Before(next) {
			next = st.retryAt
		}
	}
	return next
}

// register runs the handshake with one registration socket.
func (w *Watcher) register(ctx context.Context, socket string) (name, endpoint string, err error) {
	conn, err := newClient(socket)
	if err != nil {
		return "", "", err
	}
	defer conn.Close()
	client := registerapi.NewRegistrationClient(conn)
	callCtx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	info, err := client.GetInfo(callCtx, &registerapi.InfoRequest{})
	cancel()
	if err != nil {
		return "", "", fmt.Errorf("GetInfo: %w", err)
	}
	endpoint = info.GetEndpoint()
	if endpoint == "" {
		endpoint = socket
	}
	var regErr error
	switch info.GetType() {
	case registerapi.CSIPlugin:
		regErr = w.Registry.Register(ctx, info.GetName(), endpoint, info.GetSupportedVersions())
	default:
		regErr = fmt.Errorf("no handler registered for plugin type: %s at socket %s", info.GetType(), socket)
	}
	status := &registerapi.RegistrationStatus{PluginRegistered: regErr == nil}
	if regErr != nil {
		status.Error = regErr.Error()
	}
	callCtx, cancel = context.WithTimeout(ctx, handshakeTimeout)
	_, notifyErr := client.NotifyRegistrationStatus(callCtx, status)
	cancel()
	if regErr != nil {
		return "", "", regErr
	}
	if notifyErr != nil {
		// The driver never heard that it is registered: undo, and retry.
		_ = w.Registry.Deregister(ctx, info.GetName(), endpoint)
		return "", "", fmt.Errorf("NotifyRegistrationStatus: %w", notifyErr)
	}
	return info.GetName(), endpoint, nil
}
