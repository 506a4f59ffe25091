package node

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/pkg/kube"
)

// LeaseNamespace holds one Lease per node, the node's cheap heartbeat.
const LeaseNamespace = "kube-node-lease"

// Retry delays after a failed renewal: short first, so one lost request does
// not cost a whole interval, and capped well below the lease duration.
const (
	leaseRetryInitial = 200 * time.Millisecond
	leaseRetryMax     = 7 * time.Second
)

// leaseRenewer keeps the node's Lease renewed. It is the only writer of the
// Lease.
type leaseRenewer struct {
	client          kube.Interface
	clock           clock.Clock
	nodeName        string
	durationSeconds int32
	// nodeUID returns the registered Node's UID, empty until registration.
	nodeUID func() types.UID
	// latest is the Lease as last written; nil forces a GET.
	latest *coordinationv1.Lease
	// failed, when set, is told of each renewal that failed.
	failed func()
}

func (l *leaseRenewer) interval() time.Duration {
	return time.Duration(l.durationSeconds) * time.Second / 4
}

// run renews the Lease every quarter of its duration until ctx ends.
func (l *leaseRenewer) run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("lease", klog.KRef(LeaseNamespace, l.nodeName))
	retry := leaseRetryInitial
	for {
		wait := l.interval()
		if err := l.renew(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			logger.Error(err, "Failed to renew node lease, will retry", "retryIn", retry)
			wait, retry = retry, min(retry*2, leaseRetryMax)
		} else {
			retry = leaseRetryInitial
		}
		select {
		case <-ctx.Done():
			return
		case <-l.clock.After(wait):
		}
	}
}

// renew writes the Lease once: creates it when missing, otherwise moves
// renewTime to now and points its owner reference at the current Node.
func (l *leaseRenewer) renew(ctx context.Context) (err error) {
	defer func() {
		if err != nil && l.failed != nil {
			l.failed()
		}
	}()
	leases := l.client.CoordinationV1().Leases(LeaseNamespace)
	lease := l.latest
	if lease == nil {
		got, err := leases.Get(ctx, l.nodeName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			created, err := leases.Create(ctx, l.desired(&coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: l.nodeName, Namespace: LeaseNamespace},
			}), metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create lease: %w", err)
			}
			l.latest = created
			return nil
		case err != nil:
			return fmt.Errorf("get lease: %w", err)
		}
		lease = got
	}
	updated, err := leases.Update(ctx, l.desired(lease.DeepCopy()), metav1.UpdateOptions{})
	if err != nil {
		// A conflict or a deleted Lease: read it again next time.
		l.latest = nil
		return fmt.Errorf("update lease: %w", err)
	}
	l.latest = updated
	return nil
}

// desired fills in the fields the agent owns on lease.
func (l *leaseRenewer) desired(lease *coordinationv1.Lease) *coordinationv1.Lease {
	lease.Spec.HolderIdentity = ptr.To(l.nodeName)
	lease.Spec.LeaseDurationSeconds = ptr.To(l.durationSeconds)
	lease.Spec.RenewTime = &metav1.MicroTime{Time: l.clock.Now()}
	if uid := l.nodeUID(); uid != "" {
		lease.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "v1",
			Kind:       "Node",
			Name:       l.nodeName,
			UID:        uid,
		}}
	}
	return lease
}
