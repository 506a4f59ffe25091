package volume

import (
	"context"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/kube"
	"github.com/nodeagent/nodeagent/pkg/volume/atomic"
)

const (
	// podCertAbandonAfter is how long a request we created may stay
	// invisible (not found, or forbidden while the node authorizer's graph
	// has not seen it) before we take it as deleted and make a new one.
	podCertAbandonAfter = 10 * time.Minute
	// The wait between looks at a request while an issued credential is
	// still served (a refresh), and after failed creations. Without one
	// the worker's wake-ups would read the request on every sync.
	podCertRetryInitial = time.Second
	podCertRetryMax     = time.Minute
	// podCertMaxJitter spreads refreshes of certificates issued together.
	podCertMaxJitter = 5 * time.Minute
)

// errPodCertPending matches the error of a podCertificate source whose
// request the signer has not answered yet: the volume, and the pod, wait.
var errPodCertPending = errors.New("pod certificate is not issued yet")

// podCertPendingError says what the source waits for; it is
// errPodCertPending.
type podCertPendingError struct{ msg string }

func (e *podCertPendingError) Error() string        { return e.msg }
func (e *podCertPendingError) Is(target error) bool { return target == errPodCertPending }

// podCertKey names one podCertificate source of one pod.
type podCertKey struct {
	podUID types.UID
	volume string
	index  int // in projected.sources
}

// podCertState is what the agent knows of one source. Values are never
// changed in place: each step makes a new one.
type podCertState struct {
	issued  *podCredential  // the credential served, if any
	pending *podCertRequest // a request waiting for the signer
	final   error           // denied or failed: permanent for this pod
	// failures counts the looks and creations since the last issue that
	// left us waiting; nextTry is when the next may happen while issued
	// can be served meanwhile.
	failures int
	nextTry  time.Time
}

// podCredential is an issued key and chain.
type podCredential struct {
	key, chain []byte // PEM: one PRIVATE KEY (PKCS#8); CERTIFICATE blocks
	refreshAt  time.Time
	notAfter   time.Time
}

// podCertRequest is a PodCertificateRequest we created and its key.
type podCertRequest struct {
	name    string
	key     []byte
	created time.Time
	lastErr error // why the last look found no request, if it did not
}

// podCertStep is what to do for a source now.
type podCertStep int

const (
	podCertServe  podCertStep = iota // hand out the issued credential
	podCertCreate                    // create a request with a new key
	podCertPoll                      // read the pending request
	podCertFinal                     // report the denial or failure
)

// decidePodCert picks the next step. With nothing issued yet every call
// acts: the pod waits, and the volume manager's retry paces the calls.
func decidePodCert(st podCertState, now time.Time) podCertStep {
	switch {
	case st.final != nil:
		return podCertFinal
	case st.issued != nil && now.Before(st.nextTry):
		return podCertServe
	case st.pending != nil:
		return podCertPoll
	case st.issued == nil || !now.Before(st.issued.refreshAt):
		return podCertCreate
	}
	return podCertServe
}

// backedOff records one more look or creation that left us waiting.
func (st podCertState) backedOff(now time.Time) podCertState {
	st.failures++
	wait := podCertRetryMax
	if st.failures <= 8 {
		wait = min(podCertRetryInitial<<(st.failures-1), podCertRetryMax)
	}
	st.nextTry = now.Add(wait)
	return st
}

// observed folds what a read of the pending request returned into the
// state. jitter spreads the refresh time; it is given the most it may add.
func (st podCertState) observed(pcr *certificatesv1.PodCertificateRequest, getErr error, now time.Time, jitter func(time.Duration) time.Duration) podCertState {
	p := *st.pending
	if getErr != nil {
		invisible := apierrors.IsNotFound(getErr) || apierrors.IsForbidden(getErr)
		st = st.backedOff(now)
		if invisible && !now.Before(p.created.Add(podCertAbandonAfter)) {
			st.pending = nil
			return st
		}
		p.lastErr = getErr
		st.pending = &p
		return st
	}
	name := pcr.Namespace + "/" + pcr.Name
	for _, c := range pcr.Status.Conditions {
		if c.Status != metav1.ConditionTrue {
			continue
		}
		switch c.Type {
		case certificatesv1.PodCertificateRequestConditionTypeDenied, certificatesv1.PodCertificateRequestConditionTypeFailed:
			verb := "was denied"
			if c.Type == certificatesv1.PodCertificateRequestConditionTypeFailed {
				verb = "failed"
			}
			st.pending = nil
			st.final = fmt.Errorf("PodCertificateRequest %s for signer %q %s: reason=%q message=%q", name, pcr.Spec.SignerName, verb, c.Reason, c.Message)
			return st
		case certificatesv1.PodCertificateRequestConditionTypeIssued:
			chain := normalizeChain(pcr.Status.CertificateChain)
			if len(chain) == 0 {
				st.pending = nil
				st.final = fmt.Errorf("PodCertificateRequest %s for signer %q is issued without a certificate", name, pcr.Spec.SignerName)
				return st
			}
			refreshAt, notAfter := refreshTimes(&pcr.Status, now)
			if notAfter.After(refreshAt) {
				refreshAt = refreshAt.Add(jitter(min(podCertMaxJitter, notAfter.Sub(refreshAt)/2)))
			}
			return podCertState{issued: &podCredential{key: p.key, chain: chain, refreshAt: refreshAt, notAfter: notAfter}}
		}
	}
	p.lastErr = nil
	st.pending = &p
	return st.backedOff(now)
}

// refreshTimes reads when to refresh and when the certificate expires. The
// apiserver requires both with the chain; should a signer's status lack
// them, refresh at 80% of the validity, or in an hour.
func refreshTimes(s *certificatesv1.PodCertificateRequestStatus, now time.Time) (refreshAt, notAfter time.Time) {
	if s.NotAfter != nil {
		notAfter = s.NotAfter.Time
	}
	switch {
	case s.BeginRefreshAt != nil:
		refreshAt = s.BeginRefreshAt.Time
	case s.NotBefore != nil && s.NotAfter != nil:
		refreshAt = s.NotBefore.Add(notAfter.Sub(s.NotBefore.Time) * 8 / 10)
	default:
		refreshAt = now.Add(time.Hour)
	}
	return refreshAt, notAfter
}

// due is when the source next needs a call; false when never.
func (st podCertState) due() (time.Time, bool) {
	switch {
	case st.final != nil:
		return time.Time{}, false
	case !st.nextTry.IsZero():
		return st.nextTry, true
	case st.issued != nil:
		return st.issued.refreshAt, true
	}
	return time.Time{}, false
}

// podCertSource gets pods their podCertificate credentials: it makes a key,
// asks the signer for a certificate through a PodCertificateRequest,
// keeps both in memory until the signer's beginRefreshAt, and then does it
// again with a new key while still serving the old credential. Nothing is
// on disk but the volume's files: after a restart every source starts
// over, as with the kubelet. The lock is never held across an API call.
type podCertSource struct {
	client   kube.Interface
	nodeName types.NodeName
	clock    clock.PassiveClock
	// jitter returns a random duration below max.
	jitter func(max time.Duration) time.Duration

	mu    sync.Mutex
	state map[podCertKey]podCertState
}

func newPodCertSource(client kube.Interface, nodeName types.NodeName, c clock.PassiveClock) *podCertSource {
	return &podCertSource{
		client:   client,
		nodeName: nodeName,
		clock:    c,
		jitter: func(max time.Duration) time.Duration {
			if max <= 0 {
				return 0
			}
			return time.Duration(mathrand.Int64N(int64(max)))
		},
		state: map[podCertKey]podCertState{},
	}
}

// credential returns the key and chain of the source at index of volume,
// or an error while the signer has not issued one (errPodCertPending) or
// after it refused.
func (s *podCertSource) credential(ctx context.Context, pod *v1.Pod, volume string, index int, p *v1.PodCertificateProjection) (key, chain []byte, err error) {
	k := podCertKey{podUID: pod.UID, volume: volume, index: index}
	log := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "podUID", pod.UID, "volume", volume, "source", index, "signer", p.SignerName)
	now := s.clock.Now()
	s.mu.Lock()
	st := s.state[k]
	s.mu.Unlock()

	switch decidePodCert(st, now) {
	case podCertCreate:
		req, err := s.createRequest(ctx, pod, p)
		if err != nil {
			st = st.backedOff(now)
			if st.issued == nil {
				s.store(k, st)
				return nil, nil, err
			}
			log.V(2).Info("Pod certificate refresh failed; serving the current one", "err", err)
		} else {
			log.V(4).Info("PodCertificateRequest created", "request", req.name, "refresh", st.issued != nil)
			st.pending = req
			st = st.backedOff(now)
		}
	case podCertPoll:
		pcr, err := s.client.CertificatesV1().PodCertificateRequests(pod.Namespace).Get(ctx, st.pending.name, metav1.GetOptions{})
		before := st
		st = st.observed(pcr, err, now, s.jitter)
		switch {
		case st.final != nil:
			log.V(2).Info("PodCertificateRequest refused", "request", before.pending.name, "err", st.final)
		case st.issued != nil && st.pending == nil && st.failures == 0:
			log.V(4).Info("PodCertificateRequest issued", "request", before.pending.name, "refreshAt", st.issued.refreshAt, "notAfter", st.issued.notAfter)
		case st.pending == nil:
			log.V(2).Info("PodCertificateRequest not seen for too long; a new one will be created", "request", before.pending.name, "err", err)
		}
	}
	s.store(k, st)

	switch {
	case st.final != nil:
		return nil, nil, st.final
	case st.issued != nil:
		return st.issued.key, st.issued.chain, nil
	case st.pending != nil:
		msg := fmt.Sprintf("waiting for PodCertificateRequest %s/%s to be issued by signer %q", pod.Namespace, st.pending.name, p.SignerName)
		if st.pending.lastErr != nil {
			msg += fmt.Sprintf(" (last read: %v)", st.pending.lastErr)
		}
		return nil, nil, &podCertPendingError{msg: msg}
	}
	return nil, nil, &podCertPendingError{msg: fmt.Sprintf("the PodCertificateRequest for signer %q was not seen for %v; a new one will be created", p.SignerName, podCertAbandonAfter)}
}

func (s *podCertSource) store(k podCertKey, st podCertState) {
	s.mu.Lock()
	s.state[k] = st
	s.mu.Unlock()
}

// createRequest makes a key and asks the signer to certify it. The request
// carries what the NodeRestriction admission plugin checks against the
// pod, its service account and this node, so their UIDs are read first.
func (s *podCertSource) createRequest(ctx context.Context, pod *v1.Pod, p *v1.PodCertificateProjection) (*podCertRequest, error) {
	if s.client == nil {
		return nil, fmt.Errorf("podCertificate: no API client")
	}
	account := pod.Spec.ServiceAccountName
	if account == "" {
		account = "default"
	}
	sa, err := s.client.CoreV1().ServiceAccounts(pod.Namespace).Get(ctx, account, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("podCertificate: get service account %s/%s: %w", pod.Namespace, account, err)
	}
	node, err := s.client.CoreV1().Nodes().Get(ctx, string(s.nodeName), metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("podCertificate: get node %s: %w", s.nodeName, err)
	}
	keyPEM, csr, err := newPodCertKey(p.KeyType)
	if err != nil {
		return nil, fmt.Errorf("podCertificate: %w", err)
	}
	req := &certificatesv1.PodCertificateRequest{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:    pod.Namespace,
			GenerateName: "req-",
			// The garbage collector removes the requests with the pod.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}},
		},
		Spec: certificatesv1.PodCertificateRequestSpec{
			SignerName:                p.SignerName,
			PodName:                   pod.Name,
			PodUID:                    pod.UID,
			ServiceAccountName:        account,
			ServiceAccountUID:         sa.UID,
			NodeName:                  s.nodeName,
			NodeUID:                   node.UID,
			MaxExpirationSeconds:      p.MaxExpirationSeconds,
			StubPKCS10Request:         csr,
			UnverifiedUserAnnotations: p.UserAnnotations,
		},
	}
	created, err := s.client.CertificatesV1().PodCertificateRequests(pod.Namespace).Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("podCertificate: create PodCertificateRequest for signer %q: %w", p.SignerName, err)
	}
	return &podCertRequest{name: created.Name, key: keyPEM, created: s.clock.Now()}, nil
}

// nextRefresh is when the pod's earliest source next needs a call; false
// when none does.
func (s *podCertSource) nextRefresh(uid types.UID) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var next time.Time
	for k, st := range s.state {
		if k.podUID != uid {
			continue
		}
		if t, ok := st.due(); ok && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	return next, !next.IsZero()
}

// forget drops the pod's keys and certificates.
func (s *podCertSource) forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.state {
		if k.podUID == uid {
			delete(s.state, k)
		}
	}
}

// podCertFiles lays out a credential as the projection asks: the key and
// chain together in one file (one read gets a matching pair), and/or apart.
func podCertFiles(out map[string]atomic.FileProjection, p *v1.PodCertificateProjection, key, chain []byte, mode int32) {
	if p.CredentialBundlePath != "" {
		bundle := make([]byte, 0, len(key)+len(chain))
		bundle = append(append(bundle, key...), chain...)
		out[p.CredentialBundlePath] = atomic.FileProjection{Data: bundle, Mode: mode}
	}
	if p.KeyPath != "" {
		out[p.KeyPath] = atomic.FileProjection{Data: key, Mode: mode}
	}
	if p.CertificateChainPath != "" {
		out[p.CertificateChainPath] = atomic.FileProjection{Data: chain, Mode: mode}
	}
}
