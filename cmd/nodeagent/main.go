// Command nodeagent is a Kubernetes node agent that takes the kubelet's
// place: same flags, same configuration file, same Node.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

func main() {
	code := runMain(os.Args[1:], os.Stdout, os.Stderr)
	klog.Flush()
	os.Exit(code)
}

// runMain parses the command line, builds the configuration and runs the
// agent until SIGTERM or SIGINT. It returns the process exit code.
func runMain(args []string, stdout, stderr io.Writer) int {
	f := newFlags(newKlogFlags())
	f.fs.SetOutput(stderr)
	warnings, err := f.parse(args)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "nodeagent: %v\n", err)
		return 2
	}
	if f.version != "" {
		fmt.Fprintln(stdout, versionString())
		return 0
	}

	logger := klog.Background()
	for _, w := range warnings {
		logger.Info("Warning: " + w)
	}
	cfg, warnings, err := buildConfig(f)
	for _, w := range warnings {
		logger.Info("Warning: " + w)
	}
	if err != nil {
		// Before anything runs: a plain message a user reads at the terminal.
		fmt.Fprintf(stderr, "nodeagent: %v\n", err)
		return 1
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx = klog.NewContext(ctx, logger)
	if err := run(ctx, cfg); err != nil {
		logger.Error(err, "nodeagent stopped with an error")
		return 1
	}
	logger.Info("nodeagent stopped")
	return 0
}
