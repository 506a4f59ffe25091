package csi_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodeagent/nodeagent/pkg/volume/csi"
	"github.com/nodeagent/nodeagent/pkg/volume/csi/csitest"
)

// recordingInfo is a NodeInfo that remembers the drivers it was told of.
type recordingInfo struct {
	mu      sync.Mutex
	drivers map[string]string // name → node ID
	events  []string
}

func (r *recordingInfo) AddDriver(_ context.Context, d *csi.Driver) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drivers[d.Name] = d.NodeID
	r.events = append(r.events, "add "+d.Name)
	return nil
}

func (r *recordingInfo) RemoveDriver(_ context.Context, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.drivers, name)
	r.events = append(r.events, "remove "+name)
	return nil
}

func (r *recordingInfo) Events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

func waitStatus(t *testing.T, ch chan *registerapi.RegistrationStatus) *registerapi.RegistrationStatus {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no NotifyRegistrationStatus within 10s")
		return nil
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startWatcher runs a watcher on a fresh registration directory (short
// paths: unix sockets have a length limit) until the test ends.
func startWatcher(t *testing.T) (dir, regDir string, info *recordingInfo, reg *csi.Registry) {
	t.Helper()
	dir, err := os.MkdirTemp("", "csiw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	regDir = filepath.Join(dir, "plugins_registry")
	info = &recordingInfo{drivers: map[string]string{}}
	reg = csi.NewRegistry(info)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&csi.Watcher{Dir: regDir, Registry: reg}).Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, "watching", func() bool { _, err := os.Stat(regDir); return err == nil })
	return dir, regDir, info, reg
}

// TestWatcherRegistersAndDeregisters: a driver whose registrar puts its
// socket in the registration directory is registered with what its
// NodeGetInfo says and told so; when the socket goes it is deregistered,
// and when it comes back (the driver restarted) registered again.
func TestWatcherRegistersAndDeregisters(t *testing.T) {
	dir, regDir, info, reg := startWatcher(t)
	driverSock := filepath.Join(dir, "csi.sock")
	drv := &csitest.Driver{Name: "test.csi.dev", NodeID: "node-7", Stage: true, Topology: map[string]string{"topology.test/zone": "z1"}}
	csitest.Serve(t, driverSock, drv)

	// A plugin of another type is refused, with the reason.
	other := &csitest.Registrar{Info: registerapi.PluginInfo{Type: registerapi.DevicePlugin, Name: "gpu", SupportedVersions: []string{"v1beta1"}},
		Status: make(chan *registerapi.RegistrationStatus, 4)}
	stopOther := csitest.ServeRegistrar(t, filepath.Join(regDir, "gpu-reg.sock"), other)
	if s := waitStatus(t, other.Status); s.PluginRegistered || s.Error == "" {
		t.Fatalf("device plugin status = %+v, want refused with a reason", s)
	}
	stopOther()

	r := &csitest.Registrar{Info: registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: drv.Name, Endpoint: driverSock,
		SupportedVersions: []string{"1.0.0"}}, Status: make(chan *registerapi.RegistrationStatus, 4)}
	stop := csitest.ServeRegistrar(t, filepath.Join(regDir, drv.Name+"-reg.sock"), r)
	if s := waitStatus(t, r.Status); !s.PluginRegistered {
		t.Fatalf("status = %+v, want registered", s)
	}
	d, err := reg.Driver(drv.Name)
	if err != nil {
		t.Fatal(err)
	}
	if d.NodeID != "node-7" || !d.StageUnstage || d.MaxVolumes != 7 || d.Topology["topology.test/zone"] != "z1" || d.Endpoint != driverSock {
		t.Fatalf("registered driver = %+v", d)
	}

	stop()
	eventually(t, "deregistered", func() bool { _, err := reg.Driver(drv.Name); return err != nil })
	if _, err := reg.Driver(drv.Name); err == nil || err.Error() != "driver name test.csi.dev not found in the list of registered CSI drivers" {
		t.Fatalf("error after deregistration = %v", err)
	}

	csitest.ServeRegistrar(t, filepath.Join(regDir, drv.Name+"-reg.sock"), r)
	if s := waitStatus(t, r.Status); !s.PluginRegistered {
		t.Fatalf("status after restart = %+v, want registered", s)
	}
	if _, err := reg.Driver(drv.Name); err != nil {
		t.Fatal(err)
	}
	want := []string{"add test.csi.dev", "remove test.csi.dev", "add test.csi.dev"}
	if got := info.Events(); len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("node info events = %v, want %v", got, want)
	}
}

// TestWatcherRetriesAFailedRegistration: a registrar whose driver is not
// answering yet is told it failed, and registered once the driver is up.
func TestWatcherRetriesAFailedRegistration(t *testing.T) {
	dir, regDir, _, reg := startWatcher(t)
	driverSock := filepath.Join(dir, "csi.sock")

	r := &csitest.Registrar{Info: registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: "late.csi.dev", Endpoint: driverSock,
		SupportedVersions: []string{"1.0.0"}}, Status: make(chan *registerapi.RegistrationStatus, 8)}
	csitest.ServeRegistrar(t, filepath.Join(regDir, "late-reg.sock"), r)
	if s := waitStatus(t, r.Status); s.PluginRegistered {
		t.Fatalf("status = %+v, want a failure while the driver is down", s)
	}
	csitest.Serve(t, driverSock, &csitest.Driver{Name: "late.csi.dev", NodeID: "n"})
	for {
		s := waitStatus(t, r.Status)
		if s.PluginRegistered {
			break
		}
	}
	if _, err := reg.Driver("late.csi.dev"); err != nil {
		t.Fatal(err)
	}
}

// TestWatcherRegistersOverLongSocketPaths: a registration directory and a driver socket
// at paths longer than a unix socket address holds (a root dir deeper than
// /var/lib/kubelet, a driver named after a long namespace, as the upstream CSI mock
// specs make) are registered, and the driver answers, all the same.
func TestWatcherRegistersOverLongSocketPaths(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), "agent", "root")
	regDir := filepath.Join(dir, "plugins_registry")
	name := "csi-mock-csi-mock-volumes-fsgroup-mount-3357"
	driverDir := filepath.Join(dir, "plugins", name)
	if err := os.MkdirAll(driverDir, 0o755); err != nil {
		t.Fatal(err)
	}
	driverSock := filepath.Join(driverDir, "csi.sock")
	regSock := filepath.Join(regDir, name+"-reg.sock")
	if len(driverSock) <= 108 || len(regSock) <= 108 {
		t.Fatalf("socket paths %q, %q: want both longer than a socket address holds", driverSock, regSock)
	}
	info := &recordingInfo{drivers: map[string]string{}}
	reg := csi.NewRegistry(info)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&csi.Watcher{Dir: regDir, Registry: reg}).Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, "watching", func() bool { _, err := os.Stat(regDir); return err == nil })

	csitest.Serve(t, driverSock, &csitest.Driver{Name: name, NodeID: "node-long"})
	r := &csitest.Registrar{Info: registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: name, Endpoint: driverSock,
		SupportedVersions: []string{"1.0.0"}}, Status: make(chan *registerapi.RegistrationStatus, 4)}
	csitest.ServeRegistrar(t, regSock, r)
	if s := waitStatus(t, r.Status); !s.PluginRegistered {
		t.Fatalf("status = %+v, want registered", s)
	}
	d, err := reg.Driver(name)
	if err != nil {
		t.Fatal(err)
	}
	if d.NodeID != "node-long" || d.Endpoint != driverSock {
		t.Fatalf("registered driver = %+v, want node ID node-long at %s", d, driverSock)
	}
}
