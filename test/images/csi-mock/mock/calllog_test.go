package mock

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// e2eCall is how e2e.test reads a line of the log (MockCSICall in
// test/e2e/storage/drivers/csi.go of the pinned release).
type e2eCall struct {
	Method  string
	Request struct {
		VolumeContext map[string]string `json:"volume_context"`
		Secrets       map[string]string `json:"secrets"`
	}
	FullError struct {
		Code    codes.Code `json:"code"`
		Message string     `json:"message"`
	}
	Error string
}

// parseCalls does what e2e.test's GetCalls does with the driver container's log.
func parseCalls(t *testing.T, log string) []e2eCall {
	t.Helper()
	var calls []e2eCall
	for _, line := range strings.Split(log, "\n") {
		i := strings.Index(line, "gRPCCall:")
		if i < 0 {
			continue
		}
		var c e2eCall
		if err := json.Unmarshal([]byte(line[i+len("gRPCCall:"):]), &c); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		calls = append(calls, c)
	}
	return calls
}

func TestLogCalls(t *testing.T) {
	var log bytes.Buffer
	intercept := LogCalls(&log)
	publish := &csi.NodePublishVolumeRequest{
		VolumeId:         "v1",
		TargetPath:       "/t",
		VolumeCapability: mountCap,
		VolumeContext:    map[string]string{"csi.storage.k8s.io/pod.name": "pod-1"},
		Secrets:          map[string]string{"csi.storage.k8s.io/serviceAccount.tokens": `{"":{"token":"x"}}`},
	}
	ok := func(context.Context, any) (any, error) { return &csi.NodePublishVolumeResponse{}, nil }
	fail := func(context.Context, any) (any, error) {
		return nil, status.Error(codes.DeadlineExceeded, "fake error")
	}
	if _, err := intercept(context.Background(), publish, &grpc.UnaryServerInfo{FullMethod: "/csi.v1.Node/NodePublishVolume"}, ok); err != nil {
		t.Fatal(err)
	}
	_, err := intercept(context.Background(), &csi.NodeStageVolumeRequest{VolumeId: "v1"}, &grpc.UnaryServerInfo{FullMethod: "/csi.v1.Node/NodeStageVolume"}, fail)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("the handler's error was not passed on: %v", err)
	}
	if n := strings.Count(log.String(), "\n"); n != 2 {
		t.Fatalf("%d lines, want one per call:\n%s", n, log.String())
	}
	calls := parseCalls(t, "I1127 12:00:00.000000 1 main.go:1] unrelated\n"+log.String())
	if len(calls) != 2 {
		t.Fatalf("%d calls", len(calls))
	}
	pub, stage := calls[0], calls[1]
	if pub.Method != "/csi.v1.Node/NodePublishVolume" || pub.FullError.Code != codes.OK || pub.Error != "" {
		t.Errorf("NodePublishVolume read as %+v", pub)
	}
	if pub.Request.VolumeContext["csi.storage.k8s.io/pod.name"] != "pod-1" || pub.Request.Secrets["csi.storage.k8s.io/serviceAccount.tokens"] == "" {
		t.Errorf("the request's volume context and secrets read as %+v", pub.Request)
	}
	if stage.FullError.Code != codes.DeadlineExceeded || stage.FullError.Message != "fake error" || !strings.Contains(stage.Error, "code = DeadlineExceeded") {
		t.Errorf("the failed call read as %+v", stage)
	}
}
