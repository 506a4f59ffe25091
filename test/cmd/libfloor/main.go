// Command libfloor measures the memory floor of a Go node agent built on the same
// libraries as nodeagent: it links the agent's API, client and runtime packages, builds
// an apiserver client and a CRI client (neither connects), collects garbage, and prints
// its VmRSS and the Go heap in use. BENCHMARKS.md compares it with the agents' VmRSS.
package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	// The agent's other heavy dependencies, linked as the agent links them.
	_ "github.com/prometheus/client_golang/prometheus"
	_ "go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	_ "k8s.io/component-base/metrics/legacyregistry"
)

func main() {
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_ = informers.NewSharedInformerFactory(cs, 0).Core().V1().Pods().Informer()
	conn, err := grpc.NewClient("unix:///nonexistent.sock", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_ = runtimeapi.NewRuntimeServiceClient(conn)
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	status, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "VmRSS:") || strings.HasPrefix(l, "RssAnon:") || strings.HasPrefix(l, "RssFile:") {
			fmt.Println(strings.Join(strings.Fields(l), " "))
		}
	}
	fmt.Printf("HeapInuse: %.1f MiB, Sys: %.1f MiB\n", float64(ms.HeapInuse)/(1<<20), float64(ms.Sys)/(1<<20))
}
