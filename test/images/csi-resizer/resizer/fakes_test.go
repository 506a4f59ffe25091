package resizer

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeDriver is a CSI driver's identity, controller and node services, served on a unix
// socket: it answers with the capabilities it is given and records each
// ControllerExpandVolume request. expand, when set, answers that call instead of growing
// the volume to the size asked.
type fakeDriver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	name                  string
	noControllerService   bool
	controllerExpansion   bool
	nodeExpansion         bool
	singleNodeMultiWriter bool
	nodeExpansionRequired bool

	mu      sync.Mutex
	expands []*csi.ControllerExpandVolumeRequest
	expand  func(*csi.ControllerExpandVolumeRequest) error
}

func (d *fakeDriver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

func (d *fakeDriver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.name, VendorVersion: "test"}, nil
}

func (d *fakeDriver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	resp := &csi.GetPluginCapabilitiesResponse{}
	if !d.noControllerService {
		resp.Capabilities = append(resp.Capabilities, &csi.PluginCapability{Type: &csi.PluginCapability_Service_{
			Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}}})
	}
	return resp, nil
}

func (d *fakeDriver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	resp := &csi.ControllerGetCapabilitiesResponse{}
	add := func(t csi.ControllerServiceCapability_RPC_Type) {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{
			Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	add(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME)
	if d.controllerExpansion {
		add(csi.ControllerServiceCapability_RPC_EXPAND_VOLUME)
	}
	if d.singleNodeMultiWriter {
		add(csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER)
	}
	return resp, nil
}

func (d *fakeDriver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	resp := &csi.NodeGetCapabilitiesResponse{}
	if d.nodeExpansion {
		resp.Capabilities = append(resp.Capabilities, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{
			Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_EXPAND_VOLUME}}})
	}
	return resp, nil
}

func (d *fakeDriver) ControllerExpandVolume(_ context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	d.mu.Lock()
	d.expands = append(d.expands, proto.Clone(req).(*csi.ControllerExpandVolumeRequest))
	expand := d.expand
	d.mu.Unlock()
	if expand != nil {
		if err := expand(req); err != nil {
			return nil, err
		}
	}
	return &csi.ControllerExpandVolumeResponse{
		CapacityBytes:         req.GetCapacityRange().GetRequiredBytes(),
		NodeExpansionRequired: d.nodeExpansionRequired,
	}, nil
}

// expandRequests returns the ControllerExpandVolume requests so far.
func (d *fakeDriver) expandRequests() []*csi.ControllerExpandVolumeRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*csi.ControllerExpandVolumeRequest(nil), d.expands...)
}

func (d *fakeDriver) setExpand(f func(*csi.ControllerExpandVolumeRequest) error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.expand = f
}

// serveDriver serves d until the test ends and returns a client connection to it.
func serveDriver(t *testing.T, d *fakeDriver) *grpc.ClientConn {
	t.Helper()
	sock := filepath.Join(shortDir(t), "csi.sock")
	serveOn(t, d, sock)
	return dial(t, sock)
}

// shortDir is a fresh directory whose path is short enough for a unix socket in it
// (t.TempDir's, with the test's name in it, may not be).
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rsz")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// serveOn serves d on the socket sock until the test ends.
func serveOn(t *testing.T, d *fakeDriver, sock string) {
	t.Helper()
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csi.RegisterIdentityServer(srv, d)
	csi.RegisterControllerServer(srv, d)
	csi.RegisterNodeServer(srv, d)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
}

// dial is a client connection to sock, closed when the test ends.
func dial(t *testing.T, sock string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// newFakeClient is a fake clientset that, for claims and PVs, acts as the apiserver does
// where the resizer depends on it: each write gives the object a new resourceVersion, a
// write naming a resourceVersion fails with a conflict unless the object still has it,
// and patches are strategic merge patches. (The plain fake leaves resourceVersions alone,
// so every change would look like an informer's resync.)
func newFakeClient(objs ...runtime.Object) *fake.Clientset {
	client := fake.NewClientset(objs...)
	var version atomic.Int64
	version.Store(1000)
	tracker := client.Tracker()
	react := func(action k8stesting.Action) (bool, runtime.Object, error) {
		gvr, ns := action.GetResource(), action.GetNamespace()
		var name string
		var obj runtime.Object
		switch a := action.(type) {
		case k8stesting.UpdateAction:
			obj = a.GetObject().DeepCopyObject()
			m, err := meta.Accessor(obj)
			if err != nil {
				return true, nil, err
			}
			name = m.GetName()
		case k8stesting.PatchAction:
			name = a.GetName()
			cur, err := tracker.Get(gvr, ns, name)
			if err != nil {
				return true, nil, err
			}
			curData, err := json.Marshal(cur)
			if err != nil {
				return true, nil, err
			}
			var schema runtime.Object = &v1.PersistentVolume{}
			if _, ok := cur.(*v1.PersistentVolumeClaim); ok {
				schema = &v1.PersistentVolumeClaim{}
			}
			data, err := strategicpatch.StrategicMergePatch(curData, a.GetPatch(), schema)
			if err != nil {
				return true, nil, apierrors.NewBadRequest(err.Error())
			}
			obj = schema.DeepCopyObject()
			if err := json.Unmarshal(data, obj); err != nil {
				return true, nil, err
			}
		default:
			return false, nil, nil
		}
		cur, err := tracker.Get(gvr, ns, name)
		if err != nil {
			return true, nil, err
		}
		curMeta, _ := meta.Accessor(cur)
		newMeta, _ := meta.Accessor(obj)
		if rv := newMeta.GetResourceVersion(); rv != "" && rv != curMeta.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), name, errors.New("the object has been modified"))
		}
		newMeta.SetResourceVersion(strconv.FormatInt(version.Add(1), 10))
		if err := tracker.Update(gvr, obj, ns); err != nil {
			return true, nil, err
		}
		return true, obj.DeepCopyObject(), nil
	}
	for _, verb := range []string{"update", "patch"} {
		for _, resource := range []string{"persistentvolumeclaims", "persistentvolumes"} {
			client.PrependReactor(verb, resource, react)
		}
	}
	return client
}
