// Command kubelet-standin drives a DRA kubelet plugin the way the kubelet does,
// without a container runtime.
//
// It links the kubelet's own plugin watcher
// (k8s.io/kubernetes/pkg/kubelet/pluginmanager) and DRA manager
// (k8s.io/kubernetes/pkg/kubelet/cm/dra), so registration, service-version
// selection, claim validation, per-driver batching, reply checks and
// per-container CDI filtering are upstream code, not a re-implementation.
// Raw subcommands use the published k8s.io/kubelet gRPC clients and fail when a
// reply carries protobuf fields the client does not know (Go protobuf would
// otherwise drop a wrongly numbered field silently).
//
// Every subcommand prints exactly one JSON document on stdout; logs (klog) go
// to stderr.
//
// Exit codes: 0 ok, 1 the upstream code (or the plugin) reported an error,
// 2 usage error, 3 timed out waiting, 4 strict wire check failed,
// 5 the service answered Unimplemented.
//
// Internal signatures this file relies on, checked against
// k8s.io/kubernetes@v1.37.2:
//
//	dra.NewManager(logger klog.Logger, kubeClient clientset.Interface, stateFileDirectory string) (*Manager, error)
//	(*dra.Manager).Start(ctx, activePods ActivePodsFunc, getNode GetNodeFunc, sourcesReady config.SourcesReady) error
//	dra.GetNodeFunc = func(context.Context) (*v1.Node, error)
//	(*dra.Manager).Stop()
//	(*dra.Manager).UpdateAllocatedResourcesStatus(logger klog.Logger, pod *v1.Pod, status *v1.PodStatus)
//	pluginmanager.PluginManager.Run(ctx context.Context, sourcesReady config.SourcesReady, stopCh <-chan struct{})
//	cache.PluginHandler methods take a leading ctx
//	config.SourcesReady = {AddSource(string); AllReady() bool}
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
)

// Exit codes shared by all subcommands.
const (
	exitOK            = 0
	exitFailed        = 1
	exitUsage         = 2
	exitTimeout       = 3
	exitStrict        = 4
	exitUnimplemented = 5
)

// maxUnixPath is the size of sun_path on Linux, including the trailing NUL.
const maxUnixPath = 108

// cliError carries an exit code together with the message reported in the
// "error" field of the output document.
type cliError struct {
	code int
	err  error
}

func (e *cliError) Error() string { return e.err.Error() }
func (e *cliError) Unwrap() error { return e.err }

func failf(code int, format string, args ...any) error {
	return &cliError{code: code, err: fmt.Errorf(format, args...)}
}

func wrapErr(code int, err error) error {
	if err == nil {
		return nil
	}
	var ce *cliError
	if errors.As(err, &ce) {
		return err
	}
	return &cliError{code: code, err: err}
}

type command struct {
	summary string
	run     func(args []string) (map[string]any, error)
}

var commands = map[string]command{
	"register":      {"register a DRA plugin through the kubelet plugin watcher and DRA manager", runRegister},
	"prepare":       {"NodePrepareResources for a bound pod via the kubelet DRA manager; prints CDI IDs per container", runPrepare},
	"unprepare":     {"NodeUnprepareResources for a pod via the kubelet DRA manager", runUnprepare},
	"pod-health":    {"run the kubelet health stream, then report allocatedResourcesStatus per container", runPodHealth},
	"raw-getinfo":   {"Registration.GetInfo (1 s deadline) with a strict unknown-field check", runRawGetInfo},
	"raw-prepare":   {"raw DRAPlugin.NodePrepareResources (v1 or v1beta1), strict", runRawPrepare},
	"raw-unprepare": {"raw DRAPlugin.NodeUnprepareResources (v1 or v1beta1), strict", runRawUnprepare},
	"raw-health":    {"raw DRAResourceHealth.NodeWatchResources (v1 or v1alpha1), strict", runRawHealth},
}

func usage() string {
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("usage: kubelet-standin <subcommand> [flags]   (-h after a subcommand lists its flags)\n")
	for _, name := range names {
		fmt.Fprintf(&b, "  %-14s %s\n", name, commands[name].summary)
	}
	return b.String()
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(os.Stderr, usage())
		emit(map[string]any{"error": "missing subcommand"})
		return exitUsage
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprint(os.Stderr, usage())
		emit(map[string]any{"error": fmt.Sprintf("unknown subcommand %q", args[0])})
		return exitUsage
	}
	doc, err := cmd.run(args[1:])
	if doc == nil {
		doc = map[string]any{}
	}
	doc["command"] = args[0]
	code := exitOK
	if err != nil {
		code = exitFailed
		var ce *cliError
		if errors.As(err, &ce) {
			code = ce.code
		}
		doc["error"] = err.Error()
	}
	doc["exit_code"] = code
	emit(doc)
	return code
}

// emit writes the single JSON document of this invocation to stdout.
func emit(doc map[string]any) {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		fmt.Fprintln(os.Stderr, "kubelet-standin: encoding output:", err)
	}
}

// checkSocketPath rejects paths the kernel cannot bind or connect to.
func checkSocketPath(path string) error {
	if !strings.HasPrefix(path, "/") {
		return failf(exitUsage, "socket path %q must be absolute", path)
	}
	if len(path) >= maxUnixPath {
		return failf(exitUsage, "socket path %q is %d bytes; AF_UNIX allows at most %d", path, len(path), maxUnixPath-1)
	}
	return nil
}
