package harness

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"golang.org/x/crypto/bcrypt"
)

const registryBin = "/usr/bin/docker-registry" // Debian's docker-registry (distribution v2)

// The registries as the other nodes reach them, on the nodes' segment.
const (
	lanRegistryAddr = NodeIP + ":5000"
	lanAuthRegistry = NodeIP + ":5001"
)

// startRegistries runs two registries on one storage: an open one on RegistryAddr and one
// that demands RegistryUser's password on AuthRegistry, for pull-secret tests.
func (c *Config) startRegistries(ctx context.Context) error {
	storage := c.path("registry", "data")
	if err := os.MkdirAll(storage, 0o755); err != nil {
		return err
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(RegistryPass), bcrypt.DefaultCost)
	if err != nil {
		return err
	}
	htpasswd := c.path("registry", "htpasswd")
	if err := os.WriteFile(htpasswd, []byte(RegistryUser+":"+string(hash)+"\n"), 0o600); err != nil {
		return err
	}
	base := func(addr string) string {
		return fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: %s
  secret: nodeagent-harness
`, storage, addr)
	}
	auth := fmt.Sprintf("auth:\n  htpasswd:\n    realm: nodeagent-harness\n    path: %s\n", htpasswd)
	files := map[string]string{
		"open.yml": base(RegistryAddr),
		"auth.yml": base(AuthRegistry) + auth,
	}
	daemons := map[string]string{"registry": "open.yml", "registry-auth": "auth.yml"}
	if c.NodeCount > 1 || c.Kubeadm {
		// The same two on the nodes' segment: the other nodes' 127.0.0.1 is their own.
		files["open-lan.yml"], files["auth-lan.yml"] = base(lanRegistryAddr), base(lanAuthRegistry)+auth
		daemons["registry-lan"], daemons["registry-auth-lan"] = "open-lan.yml", "auth-lan.yml"
	}
	if err := writeFiles(c.path("registry"), files); err != nil {
		return err
	}
	for name, file := range daemons {
		if _, err := c.startDaemon(name, registryBin, []string{"serve", c.path("registry", file)}, nil); err != nil {
			return err
		}
	}
	for name, addr := range map[string]string{"registry": RegistryAddr, "registry-lan": lanRegistryAddr} {
		if _, ok := daemons[name]; !ok {
			continue
		}
		if err := c.waitReady(ctx, name, 30*time.Second, func(ctx context.Context) error {
			return httpExpect(ctx, http.DefaultClient, "http://"+addr+"/v2/", "")
		}); err != nil {
			return err
		}
	}
	return c.waitReady(ctx, "registry-auth", 30*time.Second, func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+AuthRegistry+"/v2/", nil)
		req.SetBasicAuth(RegistryUser, RegistryPass)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("authenticated GET /v2/: %s", resp.Status)
		}
		return nil
	})
}
