package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
	drav1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drav1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Timeouts the kubelet uses (pkg/kubelet/pluginmanager/operationexecutor and
// pkg/kubelet/cm/dra/plugin in v1.37.2).
const (
	kubeletDialTimeout    = 10 * time.Second
	kubeletGetInfoTimeout = 1 * time.Second
	kubeletNotifyTimeout  = 5 * time.Second
	kubeletCallTimeout    = 45 * time.Second
)

// The orders below mirror servicesSupportedByKubelet and
// healthServicesSupportedByKubelet of the v1.37.2 kubelet.
var (
	kubeletDRAServices    = []string{drav1.DRAPluginService, drav1beta1.DRAPluginService}
	kubeletHealthServices = []string{drahealthv1.DRAResourceHealthService, drahealthv1alpha1.DRAResourceHealthService}
)

// connectUnix opens a gRPC connection to a unix socket and waits until it is
// ready, like the kubelet's blocking dial.
func connectUnix(ctx context.Context, path string, timeout time.Duration) (*grpc.ClientConn, error) {
	if err := checkSocketPath(path); err != nil {
		return nil, err
	}
	if _, err := os.Stat(path); err != nil {
		return nil, failf(exitFailed, "failed to dial socket %s: %v", path, err)
	}
	conn, err := grpc.NewClient("passthrough:///"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("create gRPC client for %s: %w", path, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn.Connect()
	for {
		state := conn.GetState()
		if state == connectivity.Ready {
			return conn, nil
		}
		if !conn.WaitForStateChange(ctx, state) {
			_ = conn.Close()
			return nil, failf(exitTimeout, "failed to dial socket %s within %s (last state %s)", path, timeout, state)
		}
	}
}

// strictResult records a received message and what the strict check found.
func strictResult(doc map[string]any, key string, msg proto.Message) []string {
	problems := wireProblems(msg)
	doc[key] = protoJSON(msg)
	if prev, ok := doc["unknown_fields"].([]string); ok {
		problems = append(prev, problems...)
	}
	if problems == nil {
		problems = []string{}
	}
	doc["unknown_fields"] = problems
	return problems
}

func strictError(doc map[string]any) error {
	if problems, _ := doc["unknown_fields"].([]string); len(problems) > 0 {
		return failf(exitStrict, "reply carries fields this client does not know: %s", strings.Join(problems, "; "))
	}
	return nil
}

// chooseServices applies the kubelet's service selection to a plugin's
// supported_versions, in the plugin's order.
func chooseServices(info *registerapi.PluginInfo) (chosen, health, validationErr string) {
	versions := info.GetSupportedVersions()
	switch {
	case len(versions) == 0:
		validationErr = "empty list of supported gRPC services (aka supported versions)"
	default:
		for _, v := range versions {
			if slices.Contains(kubeletDRAServices, v) {
				chosen = v
				break
			}
		}
		if chosen == "" {
			validationErr = fmt.Sprintf("none of services supported by the plugin (%q) are supported by the kubelet (%q)", versions, kubeletDRAServices)
		}
	}
	for _, v := range kubeletHealthServices {
		if slices.Contains(versions, v) {
			health = v
			break
		}
	}
	if info.GetType() != registerapi.DRAPlugin && validationErr == "" {
		validationErr = fmt.Sprintf("plugin type %q is not %q", info.GetType(), registerapi.DRAPlugin)
	}
	return chosen, health, validationErr
}

func runRawGetInfo(args []string) (map[string]any, error) {
	fs := flag.NewFlagSet("raw-getinfo", flag.ContinueOnError)
	socket := fs.String("socket", "", "registration socket of the plugin (absolute path)")
	notify := fs.String("notify", "none", "after GetInfo send NotifyRegistrationStatus: none | auto (what the kubelet would send) | ok | fail:<message>")
	deadline := fs.Duration("deadline", kubeletGetInfoTimeout, "GetInfo deadline (the kubelet uses 1s)")
	if err := fs.Parse(args); err != nil {
		return nil, wrapErr(exitUsage, err)
	}
	if *socket == "" {
		return nil, failf(exitUsage, "--socket is required")
	}
	doc := map[string]any{"socket": *socket, "unknown_fields": []string{}}
	ctx := context.Background()
	conn, err := connectUnix(ctx, *socket, kubeletDialTimeout)
	if err != nil {
		return doc, wrapErr(exitFailed, err)
	}
	defer conn.Close()
	client := registerapi.NewRegistrationClient(conn)

	callCtx, cancel := context.WithTimeout(ctx, *deadline)
	start := time.Now()
	info, err := client.GetInfo(callCtx, &registerapi.InfoRequest{})
	cancel()
	doc["elapsed_ms"] = time.Since(start).Milliseconds()
	if err != nil {
		code := exitFailed
		if status.Code(err) == codes.DeadlineExceeded {
			code = exitTimeout
		}
		return doc, failf(code, "GetInfo at socket %s: %v", *socket, err)
	}
	strictResult(doc, "info", info)
	endpoint := info.GetEndpoint()
	if endpoint == "" {
		endpoint = *socket
	}
	chosen, health, validationErr := chooseServices(info)
	doc["endpoint"] = endpoint
	doc["chosen_service"] = chosen
	doc["health_service"] = health
	doc["validation_error"] = validationErr

	var registered bool
	var message string
	switch {
	case *notify == "none":
	case *notify == "auto":
		registered = validationErr == ""
		if !registered {
			message = "RegisterPlugin error -- plugin validation failed with err: " + validationErr
		}
	case *notify == "ok":
		registered = true
	case strings.HasPrefix(*notify, "fail:"):
		message = strings.TrimPrefix(*notify, "fail:")
	default:
		return doc, failf(exitUsage, "--notify must be none, auto, ok or fail:<message>")
	}
	if *notify != "none" {
		nctx, ncancel := context.WithTimeout(ctx, kubeletNotifyTimeout)
		resp, err := client.NotifyRegistrationStatus(nctx, &registerapi.RegistrationStatus{PluginRegistered: registered, Error: message})
		ncancel()
		doc["notified"] = map[string]any{"plugin_registered": registered, "error": message}
		if err != nil {
			return doc, failf(exitFailed, "NotifyRegistrationStatus at socket %s: %v", *socket, err)
		}
		strictResult(doc, "notify_response", resp)
	}
	return doc, strictError(doc)
}

// claimList collects repeated --claim namespace/name/uid flags.
type claimList []*drav1.Claim

func (c *claimList) String() string { return fmt.Sprint(len(*c), " claims") }

func (c *claimList) Set(v string) error {
	parts := strings.Split(v, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return fmt.Errorf("expected namespace/name/uid, got %q", v)
	}
	*c = append(*c, &drav1.Claim{Namespace: parts[0], Name: parts[1], Uid: parts[2]})
	return nil
}

type rawCallFlags struct {
	endpoint string
	service  string
	timeout  time.Duration
	claims   claimList
}

func parseRawCall(name string, args []string) (*rawCallFlags, error) {
	f := &rawCallFlags{}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.StringVar(&f.endpoint, "endpoint", "", "DRA service socket of the plugin (absolute path)")
	fs.StringVar(&f.service, "service", "v1", "service version: v1 | v1beta1")
	fs.DurationVar(&f.timeout, "timeout", kubeletCallTimeout, "per-call deadline (the kubelet uses 45s)")
	fs.Var(&f.claims, "claim", "namespace/name/uid of a claim (repeatable)")
	if err := fs.Parse(args); err != nil {
		return nil, wrapErr(exitUsage, err)
	}
	if f.endpoint == "" || len(f.claims) == 0 {
		return nil, failf(exitUsage, "--endpoint and at least one --claim are required")
	}
	if f.service != "v1" && f.service != "v1beta1" {
		return nil, failf(exitUsage, "--service must be v1 or v1beta1")
	}
	return f, nil
}

func v1beta1Claims(claims claimList) []*drav1beta1.Claim {
	out := make([]*drav1beta1.Claim, 0, len(claims))
	for _, c := range claims {
		out = append(out, &drav1beta1.Claim{Namespace: c.Namespace, Name: c.Name, Uid: c.Uid})
	}
	return out
}

func runRawPrepare(args []string) (map[string]any, error) {
	return rawCall("raw-prepare", args, true)
}

func runRawUnprepare(args []string) (map[string]any, error) {
	return rawCall("raw-unprepare", args, false)
}

func rawCall(name string, args []string, prepare bool) (map[string]any, error) {
	f, err := parseRawCall(name, args)
	if err != nil {
		return nil, err
	}
	doc := map[string]any{"endpoint": f.endpoint, "service": f.service, "unknown_fields": []string{}}
	ctx := context.Background()
	conn, err := connectUnix(ctx, f.endpoint, kubeletDialTimeout)
	if err != nil {
		return doc, wrapErr(exitFailed, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()

	var resp proto.Message
	switch {
	case f.service == "v1" && prepare:
		resp, err = drav1.NewDRAPluginClient(conn).NodePrepareResources(ctx, &drav1.NodePrepareResourcesRequest{Claims: f.claims})
	case f.service == "v1":
		resp, err = drav1.NewDRAPluginClient(conn).NodeUnprepareResources(ctx, &drav1.NodeUnprepareResourcesRequest{Claims: f.claims})
	case prepare:
		resp, err = drav1beta1.NewDRAPluginClient(conn).NodePrepareResources(ctx, &drav1beta1.NodePrepareResourcesRequest{Claims: v1beta1Claims(f.claims)})
	default:
		resp, err = drav1beta1.NewDRAPluginClient(conn).NodeUnprepareResources(ctx, &drav1beta1.NodeUnprepareResourcesRequest{Claims: v1beta1Claims(f.claims)})
	}
	if err != nil {
		doc["grpc_code"] = status.Code(err).String()
		code := exitFailed
		switch status.Code(err) {
		case codes.Unimplemented:
			code = exitUnimplemented
		case codes.DeadlineExceeded:
			code = exitTimeout
		}
		return doc, failf(code, "%s: %v", name, err)
	}
	strictResult(doc, "response", resp)
	return doc, strictError(doc)
}

// healthStream abstracts over the v1 and v1alpha1 stream types.
type healthStream interface {
	Recv() (proto.Message, error)
}

type recvFunc func() (proto.Message, error)

func (f recvFunc) Recv() (proto.Message, error) { return f() }

func runRawHealth(args []string) (map[string]any, error) {
	fs := flag.NewFlagSet("raw-health", flag.ContinueOnError)
	endpoint := fs.String("endpoint", "", "DRA service socket of the plugin (absolute path)")
	service := fs.String("service", "v1", "health service version: v1 | v1alpha1")
	seconds := fs.Float64("seconds", 5, "how long to read the stream")
	maxResponses := fs.Int("max-responses", 0, "stop after this many responses (0: no limit)")
	if err := fs.Parse(args); err != nil {
		return nil, wrapErr(exitUsage, err)
	}
	if *endpoint == "" {
		return nil, failf(exitUsage, "--endpoint is required")
	}
	doc := map[string]any{"endpoint": *endpoint, "service": *service, "unknown_fields": []string{}}
	ctx := context.Background()
	conn, err := connectUnix(ctx, *endpoint, kubeletDialTimeout)
	if err != nil {
		return doc, wrapErr(exitFailed, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Duration(*seconds*float64(time.Second)))
	defer cancel()

	var stream healthStream
	switch *service {
	case "v1":
		s, err := drahealthv1.NewDRAResourceHealthClient(conn).NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
		if err == nil {
			stream = recvFunc(func() (proto.Message, error) { return s.Recv() })
		}
		doc["open_error"] = errString(err)
	case "v1alpha1":
		s, err := drahealthv1alpha1.NewDRAResourceHealthClient(conn).NodeWatchResources(ctx, &drahealthv1alpha1.NodeWatchResourcesRequest{})
		if err == nil {
			stream = recvFunc(func() (proto.Message, error) { return s.Recv() })
		}
		doc["open_error"] = errString(err)
	default:
		return doc, failf(exitUsage, "--service must be v1 or v1alpha1")
	}

	responses := []json.RawMessage{}
	end := "error"
	var streamErr error
	if stream != nil {
		for {
			msg, err := stream.Recv()
			if err != nil {
				streamErr = err
				break
			}
			for _, p := range wireProblems(msg) {
				doc["unknown_fields"] = append(doc["unknown_fields"].([]string), fmt.Sprintf("responses[%d].%s", len(responses), p))
			}
			responses = append(responses, protoJSON(msg))
			if *maxResponses > 0 && len(responses) >= *maxResponses {
				end = "max-responses"
				break
			}
		}
	} else {
		streamErr = errors.New(doc["open_error"].(string))
	}
	doc["responses"] = responses
	switch {
	case end == "max-responses":
	case errors.Is(streamErr, io.EOF):
		end = "eof"
	case status.Code(streamErr) == codes.DeadlineExceeded || errors.Is(streamErr, context.DeadlineExceeded):
		end = "timeout"
	case status.Code(streamErr) == codes.Unimplemented:
		end = "unimplemented"
	}
	doc["end"] = end
	if err := strictError(doc); err != nil {
		return doc, err
	}
	switch end {
	case "unimplemented":
		return doc, failf(exitUnimplemented, "NodeWatchResources: %v", streamErr)
	case "error":
		return doc, failf(exitFailed, "NodeWatchResources: %v", streamErr)
	}
	return doc, nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
