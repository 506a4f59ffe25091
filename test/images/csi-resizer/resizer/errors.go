package resizer

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// isFinal says whether a ControllerExpandVolume error means the call surely ended without
// effect. Errors that are not the driver's answer (the call was never made), timeouts,
// cancellations and the codes a busy or restarting driver gives leave it open whether
// an expansion is still under way.
func isFinal(err error) bool {
	s, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch s.Code() {
	case codes.Canceled, codes.DeadlineExceeded, codes.Unavailable, codes.ResourceExhausted, codes.Aborted:
		return false
	}
	return true
}

// isInfeasible says whether a ControllerExpandVolume error means the size asked for cannot
// be had (the CSI codes for a bad request, a size out of range, a missing volume): the
// user is to lower the request, and the same size is tried again only slowly.
func isInfeasible(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.OutOfRange, codes.NotFound:
		return true
	}
	return false
}

// isInUse says whether a ControllerExpandVolume error means the driver cannot grow the
// volume while a node uses it (FailedPrecondition, in the CSI spec's words).
func isInUse(err error) bool {
	return status.Code(err) == codes.FailedPrecondition
}

// retryLater is the error of a pass that chose to wait: the claim is looked at again
// after the delay, without counting as a failure.
type retryLater struct {
	after time.Duration
	why   string
}

func (e *retryLater) Error() string { return fmt.Sprintf("%s; retrying in %s", e.why, e.after) }

// asRetryLater returns err's retryLater, if it is one.
func asRetryLater(err error) (*retryLater, bool) {
	var r *retryLater
	ok := errors.As(err, &r)
	return r, ok
}
