package harness

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Client returns a clientset for the admin kubeconfig of the running cluster.
func (c *Config) Client() (kubernetes.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig())
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = 100, 200
	return kubernetes.NewForConfig(rc)
}

func (c *Config) startEtcd(ctx context.Context, bin string) error {
	data := c.path("etcd")
	if err := os.RemoveAll(data); err != nil {
		return err
	}
	_, err := c.startDaemon("etcd", filepath.Join(bin, "etcd"), []string{
		"--name=harness",
		"--data-dir=" + data,
		"--listen-client-urls=" + etcdClientURL,
		"--advertise-client-urls=" + etcdClientURL,
		"--listen-peer-urls=" + etcdPeerURL,
		"--initial-advertise-peer-urls=" + etcdPeerURL,
		"--initial-cluster=harness=" + etcdPeerURL,
		"--listen-metrics-urls=" + etcdMetricsURL,
		// A test cluster is thrown away after the run: durability buys nothing here.
		"--unsafe-no-fsync",
		"--log-level=warn",
	}, nil)
	if err != nil {
		return err
	}
	return c.waitReady(ctx, "etcd", time.Minute, func(ctx context.Context) error {
		return httpExpect(ctx, http.DefaultClient, etcdClientURL+"/health", `"health":"true"`)
	})
}

// auditPolicy records one line per request the node makes (metadata only), so that the
// benchmark can count each agent's apiserver requests on the apiserver's side.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  userGroups: ["system:nodes"]
- level: None
`

// AuditLog is the apiserver's audit log of the node's requests.
func (c *Config) AuditLog() string { return c.path("logs", "audit.log") }

// StopAPIServer stops the kube-apiserver as an outage would: etcd, the controllers and the
// nodes keep running.
func (c *Config) StopAPIServer(ctx context.Context) error {
	return c.stopDaemon(ctx, "kube-apiserver", 5*time.Second)
}

// StartAPIServer starts the kube-apiserver again after StopAPIServer, and waits for it to
// be ready.
func (c *Config) StartAPIServer(ctx context.Context) error {
	bin, err := c.EnsureUpstream(ctx)
	if err != nil {
		return err
	}
	return c.startAPIServer(ctx, bin)
}

func (c *Config) startAPIServer(ctx context.Context, bin string) error {
	if err := writeFiles(c.path("pki"), map[string]string{"audit-policy.yaml": auditPolicy}); err != nil {
		return err
	}
	_, err := c.startDaemon("kube-apiserver", filepath.Join(bin, "kube-apiserver"), c.apiServerArgs(), nil)
	if err != nil {
		return err
	}
	cs, err := c.Client()
	if err != nil {
		return err
	}
	return c.waitReady(ctx, "kube-apiserver", 2*time.Minute, func(ctx context.Context) error {
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return err
		}
		if string(body) != "ok" {
			return fmt.Errorf("readyz: %s", body)
		}
		return nil
	})
}

// apiServerArgs is kube-apiserver's command line: kubeadm's (getAPIServerCommand in
// cmd/kubeadm/app/phases/controlplane/manifests.go) for what the two share, with the
// harness's addresses, etcd and audit log.
func (c *Config) apiServerArgs() []string {
	pki := func(f string) string { return c.path("pki", f) }
	return []string{
		"--etcd-servers=" + etcdClientURL,
		// On the nodes' segment, where every node reaches it (and only this machine does).
		"--bind-address=" + NodeIP,
		"--secure-port=" + strconv.Itoa(APIServerPort),
		// The endpoint of the kubernetes service: the address it listens on.
		"--advertise-address=" + NodeIP,
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--enable-bootstrap-token-auth=true",
		"--client-ca-file=" + pki("ca.crt"),
		"--tls-cert-file=" + pki("apiserver.crt"),
		"--tls-private-key-file=" + pki("apiserver.key"),
		"--kubelet-client-certificate=" + pki("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + pki("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		// The aggregation layer's front proxy, with kubeadm's values: the client certificate
		// the aggregator presents to extension apiservers, and what the apiserver publishes in
		// the extension-apiserver-authentication ConfigMap for them to trust its X-Remote-*
		// headers. Without it an extension apiserver takes the aggregator's requests as
		// anonymous, and its APIService fails its discovery check with a 403. As in kubeadm,
		// no --enable-aggregator-routing: the aggregator dials the Service's ClusterIP.
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--requestheader-client-ca-file=" + pki(frontProxyCA+".crt"),
		"--requestheader-allowed-names=" + frontProxyClientName,
		"--proxy-client-cert-file=" + pki(frontProxyClient+".crt"),
		"--proxy-client-key-file=" + pki(frontProxyClient+".key"),
		"--service-account-issuer=https://kubernetes.default.svc." + ClusterDomain,
		"--service-account-key-file=" + pki("sa.pub"),
		"--service-account-signing-key-file=" + pki("sa.key"),
		"--audit-policy-file=" + pki("audit-policy.yaml"),
		"--audit-log-path=" + c.AuditLog(),
		"--audit-log-format=json",
		"--audit-log-maxsize=200",
		"--v=1",
	}
}

// bootstrapRBAC creates what kubeadm creates for the identities the harness uses.
func (c *Config) bootstrapRBAC(ctx context.Context) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:cluster-admins"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "kubeadm:cluster-admins"}},
	}
	// The RBAC bootstrap roles appear a moment after readyz; retry until they do.
	return c.waitReady(ctx, "kube-apiserver", time.Minute, func(ctx context.Context) error {
		_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

func (c *Config) startControllerManager(ctx context.Context, bin string) error {
	_, err := c.startDaemon("kube-controller-manager", filepath.Join(bin, "kube-controller-manager"), c.controllerManagerArgs(), nil)
	if err != nil {
		return err
	}
	return c.waitReady(ctx, "kube-controller-manager", time.Minute, func(ctx context.Context) error {
		return httpExpect(ctx, insecureLocalClient, "https://127.0.0.1:10257/healthz", "ok")
	})
}

// controllerManagerArgs is kube-controller-manager's command line: kubeadm's
// (getControllerManagerCommand), without leader election, with the signing duration of
// Config.CertDuration.
func (c *Config) controllerManagerArgs() []string {
	pki := func(f string) string { return c.path("pki", f) }
	kc := pki("controller-manager.conf")
	args := []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		"--client-ca-file=" + pki("ca.crt"),
		// For its own secure port, as kubeadm has it: the front proxy's identities it trusts.
		"--requestheader-client-ca-file=" + pki(frontProxyCA+".crt"),
		"--cluster-signing-cert-file=" + pki("ca.crt"),
		"--cluster-signing-key-file=" + pki("ca.key"),
		"--root-ca-file=" + pki("ca.crt"),
		"--service-account-private-key-file=" + pki("sa.key"),
		"--use-service-account-credentials=true",
		"--controllers=*,bootstrapsigner,tokencleaner",
		"--allocate-node-cidrs=true",
		"--cluster-cidr=" + ClusterCIDR,
		"--node-cidr-mask-size=24",
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--leader-elect=false",
		"--v=1",
	}
	if c.CertDuration > 0 {
		// No lower bound applies when a CSR asks for no duration, as the agent's do.
		args = append(args, "--cluster-signing-duration="+c.CertDuration.String())
	}
	return args
}

func (c *Config) startScheduler(ctx context.Context, bin string) error {
	kc := c.path("pki", "scheduler.conf")
	_, err := c.startDaemon("kube-scheduler", filepath.Join(bin, "kube-scheduler"), []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		"--leader-elect=false",
		"--v=1",
	}, nil)
	if err != nil {
		return err
	}
	return c.waitReady(ctx, "kube-scheduler", time.Minute, func(ctx context.Context) error {
		return httpExpect(ctx, insecureLocalClient, "https://127.0.0.1:10259/healthz", "ok")
	})
}

// httpExpect GETs url and wants a 200 whose body contains want.
func httpExpect(ctx context.Context, client *http.Client, url, want string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return nil
}
