// Command nodediff brings up the harness twice, once with the upstream kubelet and once
// with nodeagent as the node, and prints the differences between the two Node objects they
// wrote, field by field, as a Markdown table (see docs/node-comparison.md).
//
// Fields that differ between any two registrations (UIDs, resource versions, timestamps)
// are compared by presence only.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/harness"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "nodediff:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	nodes := map[string]map[string]string{}
	for _, agent := range []string{harness.AgentKubelet, harness.AgentNodeagent} {
		cfg := &harness.Config{Agent: agent}
		node, err := nodeOf(ctx, cfg)
		if derr := harness.Down(ctx, cfg); derr != nil && err == nil {
			err = derr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", agent, err)
		}
		nodes[agent] = node
	}
	printDiff(nodes[harness.AgentKubelet], nodes[harness.AgentNodeagent])
	return nil
}

// nodeOf brings up the harness with cfg's agent and returns its Node, flattened, once its
// status is complete (Ready, with the image list).
func nodeOf(ctx context.Context, cfg *harness.Config) (map[string]string, error) {
	if err := harness.Up(ctx, cfg); err != nil {
		return nil, err
	}
	cs, err := cfg.Client()
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		node, err := cs.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{})
		if err == nil && len(node.Status.Images) > 0 && node.Spec.PodCIDR != "" && len(node.Status.Conditions) >= 4 {
			node.ManagedFields = nil
			return flatten(node)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("node status incomplete after 2m: %v", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

var volatile = regexp.MustCompile(`(uid|resourceVersion|creationTimestamp|Time|renewTime)$`)

func flatten(node *corev1.Node) (map[string]string, error) {
	data, err := json.Marshal(node)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	out := map[string]string{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch t := v.(type) {
		case map[string]any:
			for k, e := range t {
				walk(path+"."+k, e)
			}
		case []any:
			// Conditions and addresses are keyed by type; images by position is noise.
			if strings.HasSuffix(path, ".images") {
				out[path] = fmt.Sprintf("%d images", len(t))
				return
			}
			for i, e := range t {
				key := fmt.Sprint(i)
				if m, ok := e.(map[string]any); ok && m["type"] != nil {
					key = fmt.Sprint(m["type"])
				}
				walk(path+"["+key+"]", e)
			}
		default:
			s := fmt.Sprint(t)
			if volatile.MatchString(path) {
				s = "(set)"
			}
			out[path] = s
		}
	}
	walk("", v)
	return out, nil
}

func printDiff(kubelet, agent map[string]string) {
	keys := map[string]bool{}
	for k := range kubelet {
		keys[k] = true
	}
	for k := range agent {
		keys[k] = true
	}
	var sorted []string
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	fmt.Println("| field | upstream kubelet | nodeagent |")
	fmt.Println("|---|---|---|")
	same := 0
	for _, k := range sorted {
		a, okA := kubelet[k]
		b, okB := agent[k]
		if okA && okB && a == b {
			same++
			continue
		}
		if !okA {
			a = "—"
		}
		if !okB {
			b = "—"
		}
		fmt.Printf("| `%s` | %s | %s |\n", strings.TrimPrefix(k, "."), cell(a), cell(b))
	}
	fmt.Printf("\n%d fields identical (volatile ones compared by presence).\n", same)
}

func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}
