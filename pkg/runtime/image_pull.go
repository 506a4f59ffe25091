package runtime

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The kubelet's image errors; their text is the waiting reason users see.
var (
	ErrImagePull      = errors.New("ErrImagePull")
	ErrImageNeverPull = errors.New("ErrImageNeverPull")
	ErrInvalidImage   = errors.New("InvalidImageName")
	ErrImagePullBack  = errors.New("ImagePullBackOff")
)

// ParseImage validates an image reference, applies the default tag the
// way the kubelet does (busybox → busybox:latest; the runtime resolves the
// registry itself) and returns the registry host its credentials are
// looked up under.
func ParseImage(image string) (withTag, registry string, err error) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return "", "", fmt.Errorf("%w: %q: %w", ErrInvalidImage, image, err)
	}
	withTag = image
	last := image[strings.LastIndex(image, "/")+1:]
	if !strings.Contains(image, "@") && !strings.Contains(last, ":") {
		withTag = image + ":" + name.DefaultTag
	}
	return withTag, ref.Context().RegistryStr(), nil
}

// dockerConfig is the content of a kubernetes.io/dockerconfigjson secret.
type dockerConfig struct {
	Auths map[string]dockerAuth `json:"auths"`
}

type dockerAuth struct {
	Username string `json:"username"`
	Password string `json:"password"`
	Auth     string `json:"auth"`
}

// PullCredential is one credential of a pod's pull secrets, with the
// secret it came from.
type PullCredential struct {
	Auth *runtimeapi.AuthConfig
	// Namespace, Name and UID are the secret's.
	Namespace, Name string
	UID             types.UID
	// Hash identifies the credential whatever secret holds it: the hex
	// SHA-256 of the registry, user name and password.
	Hash string
}

// PullAuths returns the credentials among secrets that apply to an image
// on registry, in the order of the pod's imagePullSecrets.
func PullAuths(registry string, secrets []*v1.Secret) []PullCredential {
	var out []PullCredential
	for _, s := range secrets {
		var auths map[string]dockerAuth
		switch s.Type {
		case v1.SecretTypeDockerConfigJson:
			var dc dockerConfig
			if json.Unmarshal(s.Data[v1.DockerConfigJsonKey], &dc) != nil {
				continue
			}
			auths = dc.Auths
		case v1.SecretTypeDockercfg:
			if json.Unmarshal(s.Data[v1.DockerConfigKey], &auths) != nil {
				continue
			}
		default:
			continue
		}
		for _, host := range sortedKeys(auths) {
			a := auths[host]
			if registryHost(host) != registry {
				continue
			}
			user, pass := a.Username, a.Password
			if a.Auth != "" {
				if raw, err := base64.StdEncoding.DecodeString(a.Auth); err == nil {
					user, pass, _ = strings.Cut(string(raw), ":")
				}
			}
			// No ServerAddress: runtimes parse it as a URL, which a bare
			// host:port is not, and they know the registry from the image.
			out = append(out, PullCredential{
				Auth:      &runtimeapi.AuthConfig{Username: user, Password: pass},
				Namespace: s.Namespace, Name: s.Name, UID: s.UID,
				Hash: credentialHash(registry, user, pass),
			})
		}
	}
	return out
}

// credentialHash is PullCredential.Hash. The fields are JSON-encoded
// together so that no two (registry, user, password) share an input.
func credentialHash(registry, user, pass string) string {
	data, _ := json.Marshal([]string{registry, user, pass}) // strings always encode
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// registryHost strips a scheme and path from a docker config key.
func registryHost(key string) string {
	key = strings.TrimPrefix(strings.TrimPrefix(key, "https://"), "http://")
	key, _, _ = strings.Cut(key, "/")
	if key == "index.docker.io" {
		return name.DefaultRegistry
	}
	return key
}

// sortedKeys makes the order credentials are tried in stable.
func sortedKeys(m map[string]dockerAuth) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
