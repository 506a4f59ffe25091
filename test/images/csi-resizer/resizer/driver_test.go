package resizer

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
)

func TestDiscover(t *testing.T) {
	for _, tc := range []struct {
		name    string
		driver  *fakeDriver
		want    Driver
		wantErr error // nil: no error; errAny: some error
	}{
		{name: "controller expansion", driver: &fakeDriver{controllerExpansion: true, nodeExpansion: true, singleNodeMultiWriter: true},
			want: Driver{ControllerExpansion: true, SingleNodeMultiWriter: true}},
		{name: "node only", driver: &fakeDriver{nodeExpansion: true}, want: Driver{}},
		{name: "no expansion", driver: &fakeDriver{}, wantErr: ErrExpansionUnsupported},
		{name: "no controller service", driver: &fakeDriver{noControllerService: true, nodeExpansion: true}, wantErr: errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.driver
			d.name = testDriver
			conn := serveDriver(t, d)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got, err := Discover(ctx, conn, 5*time.Second)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("Discover: %v", err)
			case tc.wantErr == errAny && err == nil, tc.wantErr != nil && tc.wantErr != errAny && !errors.Is(err, tc.wantErr):
				t.Fatalf("Discover error = %v, want %v", err, tc.wantErr)
			case tc.wantErr != nil:
				return
			}
			tc.want.Name = testDriver
			if got != tc.want {
				t.Errorf("Discover = %+v, want %+v", got, tc.want)
			}
		})
	}
}

var errAny = errors.New("any error")

// TestDiscoverWaitsForTheDriver: the driver's container may start after the resizer's,
// so Discover probes until the socket is served.
func TestDiscoverWaitsForTheDriver(t *testing.T) {
	sock := filepath.Join(shortDir(t), "csi.sock")
	conn := dial(t, sock)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type result struct {
		d   Driver
		err error
	}
	done := make(chan result, 1)
	go func() {
		d, err := Discover(ctx, conn, time.Second)
		done <- result{d, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("Discover returned before the driver was served: %+v, %v", r.d, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	serveOn(t, &fakeDriver{name: testDriver, controllerExpansion: true}, sock)
	r := <-done
	if r.err != nil || r.d.Name != testDriver {
		t.Fatalf("Discover = %+v, %v", r.d, r.err)
	}
}

func TestAccessMode(t *testing.T) {
	type modes = []v1.PersistentVolumeAccessMode
	for _, tc := range []struct {
		name    string
		modes   modes
		snmw    bool
		want    csi.VolumeCapability_AccessMode_Mode
		wantErr bool
	}{
		{name: "RWO", modes: modes{v1.ReadWriteOnce}, want: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		{name: "RWO, single node multi writer", modes: modes{v1.ReadWriteOnce}, snmw: true, want: csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER},
		{name: "RWOP", modes: modes{v1.ReadWriteOncePod}, want: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		{name: "RWOP, single node multi writer", modes: modes{v1.ReadWriteOncePod}, snmw: true, want: csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER},
		{name: "RWOP with another", modes: modes{v1.ReadWriteOncePod, v1.ReadWriteOnce}, wantErr: true},
		{name: "RWX wins", modes: modes{v1.ReadWriteOnce, v1.ReadOnlyMany, v1.ReadWriteMany}, want: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		{name: "ROX", modes: modes{v1.ReadOnlyMany}, want: csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY},
		{name: "ROX with RWO", modes: modes{v1.ReadOnlyMany, v1.ReadWriteOnce}, wantErr: true},
		{name: "none", modes: nil, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := accessMode(tc.modes, tc.snmw)
			if (err != nil) != tc.wantErr {
				t.Fatalf("accessMode error = %v, want error %t", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("accessMode = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestVolumeCapability(t *testing.T) {
	_, pv := boundClaim("2Gi")
	pv.Spec.MountOptions = []string{"noatime"}
	c, err := volumeCapability(pv, false)
	if err != nil {
		t.Fatal(err)
	}
	if m := c.GetMount(); m == nil || m.GetFsType() != "ext4" || len(m.GetMountFlags()) != 1 {
		t.Errorf("mount capability = %v", c)
	}
	block := v1.PersistentVolumeBlock
	pv.Spec.VolumeMode = &block
	if c, err = volumeCapability(pv, false); err != nil || c.GetBlock() == nil {
		t.Errorf("block capability = %v, %v", c, err)
	}
}
