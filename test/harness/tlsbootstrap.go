package harness

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// bootstrapTokenGroup is the group kubeadm's default node token authenticates into.
const bootstrapTokenGroup = "system:bootstrappers:kubeadm:default-node-token"

// BootstrapKubeconfig is the bootstrap token kubeconfig the node agent starts from when
// TLSBootstrap is on.
func (c *Config) BootstrapKubeconfig() string { return c.path("pki", "bootstrap-kubelet.conf") }

// setupTLSBootstrap gives the cluster what kubeadm init gives it for nodes to join with a
// token (a bootstrap token Secret; the bindings that let the token's group send node CSRs
// that the controller-manager approves, and nodes renew their own), writes the bootstrap
// kubeconfig and removes the node's kubeconfig, which the agent then writes itself.
func (c *Config) setupTLSBootstrap(ctx context.Context) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	id, secret := randomToken(6), randomToken(16)
	tokenSecret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: metav1.NamespaceSystem},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"description":                    "the harness's node bootstrap token",
			"token-id":                       id,
			"token-secret":                   secret,
			"expiration":                     time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339),
			"usage-bootstrap-authentication": "true",
			"usage-bootstrap-signing":        "true",
			"auth-extra-groups":              bootstrapTokenGroup,
		},
	}
	if _, err := cs.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, tokenSecret, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("bootstrap token: %w", err)
	}
	bindings := map[string][2]string{ // name: role, group
		"kubeadm:kubelet-bootstrap":                     {"system:node-bootstrapper", bootstrapTokenGroup},
		"kubeadm:node-autoapprove-bootstrap":            {"system:certificates.k8s.io:certificatesigningrequests:nodeclient", bootstrapTokenGroup},
		"kubeadm:node-autoapprove-certificate-rotation": {"system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"},
	}
	for name, b := range bindings {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b[0]},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: b[1]}},
		}
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("cluster role binding %s: %w", name, err)
		}
	}
	ca, err := os.ReadFile(c.path("pki", "ca.crt"))
	if err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["nodeagent"] = &clientcmdapi.Cluster{Server: APIServerURL(), CertificateAuthorityData: ca}
	kc.AuthInfos["tls-bootstrap-token-user"] = &clientcmdapi.AuthInfo{Token: id + "." + secret}
	kc.Contexts["tls-bootstrap"] = &clientcmdapi.Context{Cluster: "nodeagent", AuthInfo: "tls-bootstrap-token-user"}
	kc.CurrentContext = "tls-bootstrap"
	if err := clientcmd.WriteToFile(*kc, c.BootstrapKubeconfig()); err != nil {
		return err
	}
	if err := os.Remove(c.AgentKubeconfig()); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// randomToken is n characters of [a-z0-9], the bootstrap token alphabet.
func randomToken(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// ApproveServingCSRs approves the node's pending kubelet-serving CSRs, as a cluster admin
// does (the controller-manager approves only client certificates), and returns their names.
func (c *Config) ApproveServingCSRs(ctx context.Context) ([]string, error) {
	cs, err := c.Client()
	if err != nil {
		return nil, err
	}
	list, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var approved []string
	for i := range list.Items {
		csr := &list.Items[i]
		if csr.Spec.SignerName != certificatesv1.KubeletServingSignerName || csr.Spec.Username != "system:node:"+NodeName || decided(csr) {
			continue
		}
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue,
			Reason: "HarnessApproved", Message: "approved by the harness as a cluster admin would",
		})
		if _, err := cs.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
			return approved, fmt.Errorf("approve %s: %w", csr.Name, err)
		}
		approved = append(approved, csr.Name)
	}
	return approved, nil
}

func decided(csr *certificatesv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		switch c.Type {
		case certificatesv1.CertificateApproved, certificatesv1.CertificateDenied, certificatesv1.CertificateFailed:
			return true
		}
	}
	return false
}

// approveFirstServingCSR waits for the node's first serving CSR and approves it.
func (c *Config) approveFirstServingCSR(ctx context.Context) error {
	return c.waitReady(ctx, "agent", time.Minute, func(ctx context.Context) error {
		names, err := c.ApproveServingCSRs(ctx)
		if err != nil {
			return err
		}
		if len(names) == 0 {
			return fmt.Errorf("no kubelet-serving CSR from %s yet", NodeName)
		}
		c.Logf("approved the node's serving certificate request %s", names[0])
		return nil
	})
}
