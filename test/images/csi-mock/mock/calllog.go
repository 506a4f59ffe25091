package mock

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// CallPrefix starts every call's line in the log; e2e.test's GetCalls looks for it.
const CallPrefix = "gRPCCall: "

// Call is one line of the call log after CallPrefix, as e2e.test's MockCSICall reads it
// (test/e2e/storage/drivers/csi.go): the full method name, the request and the response as
// encoding/json writes the generated CSI types (so the volume context is "volume_context"
// and the secrets "secrets", secrets included), the error's text, and its gRPC status
// (code and message; null on success, which e2e.test reads as OK).
type Call struct {
	Method    string
	Request   any
	Response  any
	Error     string
	FullError *FullError
}

// FullError is a failed call's gRPC status, with the JSON names of google.rpc.Status.
type FullError struct {
	Code    uint32 `json:"code"`
	Message string `json:"message"`
}

// LogCalls returns an interceptor that writes every unary call to w as CallPrefix and the
// call's JSON on one line, after the handler returns. Lines are written whole, one at a
// time: w is the container's log, and e2e.test reads it line by line.
func LogCalls(w io.Writer) grpc.UnaryServerInterceptor {
	var mu sync.Mutex
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		line := callLine(info.FullMethod, req, resp, err)
		mu.Lock()
		defer mu.Unlock()
		_, _ = io.WriteString(w, line)
		return resp, err
	}
}

// callLine is the log line of one call, newline included.
func callLine(method string, req, resp any, err error) string {
	c := Call{Method: method, Request: req, Response: resp}
	if err != nil {
		c.Error = err.Error()
		st := status.Convert(err)
		c.FullError = &FullError{Code: uint32(st.Code()), Message: st.Message()}
	}
	data, jerr := json.Marshal(c)
	if jerr != nil {
		// Still a line e2e.test parses, with the method it looks for.
		data, _ = json.Marshal(Call{Method: method, Error: fmt.Sprintf("encode the call: %v", jerr)})
	}
	return CallPrefix + string(data) + "\n"
}
