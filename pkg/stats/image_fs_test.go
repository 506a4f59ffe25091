package stats

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestImageFsStatsIsTheSummarysImageFs(t *testing.T) {
	f := newFixture(t, true)
	got, err := f.provider.ImageFsStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got.UsedBytes == nil || *got.UsedBytes != 123456 {
		t.Errorf("usedBytes %v, want the runtime's 123456", got.UsedBytes)
	}
	if got.CapacityBytes == nil || *got.CapacityBytes == 0 || got.AvailableBytes == nil || *got.AvailableBytes > *got.CapacityBytes {
		t.Errorf("capacity %v available %v, want statfs of the mountpoint", got.CapacityBytes, got.AvailableBytes)
	}

	f.cri.imageFs = &runtimeapi.ImageFsInfoResponse{}
	if _, err := f.provider.ImageFsStats(context.Background()); err == nil {
		t.Error("no error when the runtime reports no image filesystem")
	}
}

func TestImageFsStatsReturnsTheRuntimesError(t *testing.T) {
	f := newFixture(t, true)
	f.cri.imageFs = nil
	f.provider.cfg.Images = failingImages{}
	if _, err := f.provider.ImageFsStats(context.Background()); !errors.Is(err, errImageFs) {
		t.Errorf("err = %v, want the runtime's", err)
	}
}

var errImageFs = errors.New("image fs unavailable")

type failingImages struct{}

func (failingImages) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest, ...grpc.CallOption) (*runtimeapi.ImageFsInfoResponse, error) {
	return nil, errImageFs
}
