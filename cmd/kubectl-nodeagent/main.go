// Command kubectl-nodeagent is a kubectl plugin that shows what nodeagent
// did for a pod, from the agent of the pod's node, through the
// apiserver's node proxy:
//
//	kubectl nodeagent timeline POD [-n NAMESPACE] [--html FILE]
//	kubectl nodeagent why POD [-n NAMESPACE]
//
// timeline draws the pod's steps as a waterfall (or writes it as a
// self-contained HTML page); why says the step the pod is on, since when,
// and the last error. Both read /debug/pods/<namespace>/<pod>/... of the
// node API, which needs get on nodes/proxy.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeagent/nodeagent/pkg/timeline"
)

const usage = `Show what nodeagent did for a pod.

Usage:
  kubectl nodeagent timeline POD [-n NAMESPACE] [--html FILE]
  kubectl nodeagent why POD [-n NAMESPACE]

Flags:
`

// requestTimeout bounds the whole command.
const requestTimeout = 30 * time.Second

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// options are the command line.
type options struct {
	command, pod          string
	namespace, kubeconfig string
	context, html         string
	explicitNamespace     bool
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := pflag.NewFlagSet("kubectl-nodeagent", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVarP(&o.namespace, "namespace", "n", "", "the pod's namespace (default: the kubeconfig context's)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&o.context, "context", "", "the kubeconfig context to use")
	fs.StringVar(&o.html, "html", "", "timeline: write the waterfall as an HTML page to this file")
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.explicitNamespace = fs.Changed("namespace")
	if fs.NArg() != 2 || (fs.Arg(0) != "timeline" && fs.Arg(0) != "why") {
		fs.Usage()
		return o, errors.New("want a command (timeline or why) and a pod name")
	}
	o.command, o.pod = fs.Arg(0), fs.Arg(1)
	if o.html != "" && o.command != "timeline" {
		return o, errors.New("--html goes with timeline")
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.context})
	if !o.explicitNamespace {
		if o.namespace, _, err = cc.Namespace(); err != nil {
			return err
		}
	}
	rc, err := cc.ClientConfig()
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	pod, err := cs.CoreV1().Pods(o.namespace).Get(ctx, o.pod, metav1.GetOptions{})
	if err != nil {
		return err
	}
	node := pod.Spec.NodeName
	if node == "" {
		return fmt.Errorf("pod %s/%s is not scheduled to a node yet: no agent has seen it", o.namespace, o.pod)
	}
	get := func(what string, into any) error {
		raw, err := cs.CoreV1().RESTClient().Get().
			AbsPath("/api/v1/nodes", node, "proxy", "debug", "pods", o.namespace, o.pod, what).DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("ask the agent of node %s: %w", node, err)
		}
		return json.Unmarshal(raw, into)
	}
	switch o.command {
	case "why":
		var w timeline.Why
		if err := get("why", &w); err != nil {
			return err
		}
		return renderWhy(stdout, w, node)
	default:
		var t timeline.Timeline
		if err := get("timeline", &t); err != nil {
			return err
		}
		if o.html == "" {
			return renderWaterfall(stdout, t, node)
		}
		f, err := os.Create(o.html)
		if err != nil {
			return err
		}
		if err := renderHTML(f, t, node); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s\n", o.html)
		return nil
	}
}
