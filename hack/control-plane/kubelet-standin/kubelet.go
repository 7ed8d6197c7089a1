package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
)

// sourcesNeverReady satisfies config.SourcesReady. AllReady()==false keeps the
// DRA manager's reconcile loop from unpreparing claims behind a test's back;
// the plugin manager does not consult it at all.
type sourcesNeverReady struct{}

func (sourcesNeverReady) AddSource(string) {}
func (sourcesNeverReady) AllReady() bool   { return false }

// regEvent is one outcome reported by the kubelet's DRA registration handler.
type regEvent struct {
	Op       string   `json:"op"`
	Driver   string   `json:"driver"`
	Endpoint string   `json:"endpoint"`
	Versions []string `json:"supported_versions,omitempty"`
	Error    string   `json:"error,omitempty"`
}

// recordingHandler wraps the DRA manager's cache.PluginHandler and records
// what the plugin watcher asked it and what it answered.
type recordingHandler struct {
	inner   cache.PluginHandler
	mu      sync.Mutex
	events  []regEvent
	changed chan struct{}
}

func newRecordingHandler(inner cache.PluginHandler) *recordingHandler {
	return &recordingHandler{inner: inner, changed: make(chan struct{})}
}

func (h *recordingHandler) record(ev regEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, ev)
	close(h.changed)
	h.changed = make(chan struct{})
}

func (h *recordingHandler) snapshot() ([]regEvent, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events), h.changed
}

func (h *recordingHandler) ValidatePlugin(ctx context.Context, name, endpoint string, versions []string) error {
	err := h.inner.ValidatePlugin(ctx, name, endpoint, versions)
	if err != nil {
		h.record(regEvent{Op: "validate", Driver: name, Endpoint: endpoint, Versions: versions, Error: err.Error()})
	}
	return err
}

func (h *recordingHandler) RegisterPlugin(ctx context.Context, name, endpoint string, versions []string, timeout *time.Duration) error {
	err := h.inner.RegisterPlugin(ctx, name, endpoint, versions, timeout)
	h.record(regEvent{Op: "register", Driver: name, Endpoint: endpoint, Versions: versions, Error: errString(err)})
	return err
}

func (h *recordingHandler) DeRegisterPlugin(ctx context.Context, name, endpoint string) {
	h.inner.DeRegisterPlugin(ctx, name, endpoint)
	h.record(regEvent{Op: "deregister", Driver: name, Endpoint: endpoint})
}

// registrationSettle is how long a registration must stand before it counts:
// the plugin watcher sends NotifyRegistrationStatus only after RegisterPlugin
// returned, and deregisters the plugin again if that notification fails.
const registrationSettle = time.Second

// registeredDrivers replays the recorded events. It returns the drivers that
// are registered now and the first failure that concerns the wanted drivers
// (all drivers when wanted is empty).
func registeredDrivers(events []regEvent, wanted []string) (map[string]bool, error) {
	ok := map[string]bool{}
	concerns := func(d string) bool { return len(wanted) == 0 || slices.Contains(wanted, d) }
	for _, ev := range events {
		switch {
		case ev.Error != "" && concerns(ev.Driver):
			return ok, fmt.Errorf("%s of DRA driver %s at %s failed: %s", ev.Op, ev.Driver, ev.Endpoint, ev.Error)
		case ev.Op == "register" && ev.Error == "":
			ok[ev.Driver] = true
		case ev.Op == "deregister":
			if ok[ev.Driver] && concerns(ev.Driver) {
				return ok, fmt.Errorf("DRA driver %s at %s was deregistered after registration (NotifyRegistrationStatus failed or the socket went away)", ev.Driver, ev.Endpoint)
			}
			delete(ok, ev.Driver)
		}
	}
	return ok, nil
}

// waitRegistered blocks until every wanted driver has registered and the
// registration has stood for registrationSettle. A failed validation,
// registration or notification of one of them ends the wait with that error.
// With no drivers it waits for the first registration of any driver.
func (h *recordingHandler) waitRegistered(ctx context.Context, drivers []string) error {
	var settledAt time.Time
	for {
		events, changed := h.snapshot()
		ok, err := registeredDrivers(events, drivers)
		if err != nil {
			return err
		}
		complete := len(ok) > 0
		for _, d := range drivers {
			complete = complete && ok[d]
		}
		var tick <-chan time.Time
		switch {
		case !complete:
			settledAt = time.Time{}
		case settledAt.IsZero():
			settledAt = time.Now().Add(registrationSettle)
			tick = time.After(registrationSettle)
		case !time.Now().Before(settledAt):
			return nil
		default:
			tick = time.After(time.Until(settledAt))
		}
		select {
		case <-changed:
		case <-tick:
		case <-ctx.Done():
			return failf(exitTimeout, "timed out waiting for DRA driver(s) %q to register (no socket in the registry dir, or GetInfo failed; see -v=4 logs)", drivers)
		}
	}
}

// kubeletFlags are shared by the subcommands that run kubelet code.
type kubeletFlags struct {
	fs           *flag.FlagSet
	kubeconfig   string
	node         string
	registryDir  string
	stateDir     string
	featureGates string
	timeout      time.Duration
	wipeSlices   bool
	drivers      stringList
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func newKubeletFlags(name string) *kubeletFlags {
	f := &kubeletFlags{fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	f.fs.StringVar(&f.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the API server")
	f.fs.StringVar(&f.node, "node", "", "name of the node this stand-in plays the kubelet for")
	f.fs.StringVar(&f.registryDir, "registry-dir", "", "plugins_registry directory to watch (keep paths short: 108-byte socket limit)")
	f.fs.StringVar(&f.stateDir, "state-dir", "", "kubelet root substitute; holds dra_manager_state (reuse it between prepare and unprepare)")
	f.fs.StringVar(&f.featureGates, "feature-gates", "", "kubelet feature gates, e.g. ResourceHealthStatus=true")
	f.fs.DurationVar(&f.timeout, "timeout", 60*time.Second, "overall deadline for waits (registration, scheduling)")
	f.fs.BoolVar(&f.wipeSlices, "wipe-slices", false, "let the DRA manager wipe this node's ResourceSlices at start, as a restarting kubelet does")
	f.fs.Var(&f.drivers, "driver", "DRA driver name to wait for (repeatable)")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	f.fs.Var(klogFlags.Lookup("v").Value, "v", "klog verbosity (logs go to stderr)")
	return f
}

func (f *kubeletFlags) parse(args []string) error {
	if err := f.fs.Parse(args); err != nil {
		return wrapErr(exitUsage, err)
	}
	if f.kubeconfig == "" || f.registryDir == "" || f.stateDir == "" {
		return failf(exitUsage, "--kubeconfig, --registry-dir and --state-dir are required")
	}
	if f.featureGates != "" {
		if err := utilfeature.DefaultMutableFeatureGate.Set(f.featureGates); err != nil {
			return failf(exitUsage, "--feature-gates: %v", err)
		}
	}
	return nil
}

// kubeletSide is the running subset of a kubelet: DRA manager plus plugin watcher.
type kubeletSide struct {
	client  kubernetes.Interface
	manager *dra.Manager
	handler *recordingHandler
	cancel  context.CancelFunc
	done    chan struct{}
}

func startKubeletSide(ctx context.Context, f *kubeletFlags) (*kubeletSide, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	if err != nil {
		return nil, failf(exitUsage, "load kubeconfig: %v", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	if err := os.MkdirAll(f.stateDir, 0o750); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	logger := klog.FromContext(ctx)
	manager, err := dra.NewManager(logger, client, f.stateDir)
	if err != nil {
		return nil, fmt.Errorf("create DRA manager: %w", err)
	}
	// The DRA plugin manager deletes all ResourceSlices of the node at start
	// (and per driver after its plugin has been gone for 30 s). Answering
	// NotFound for the node disables that unless a test asks for it.
	getNode := func(ctx context.Context) (*v1.Node, error) {
		if !f.wipeSlices || f.node == "" {
			return nil, apierrors.NewNotFound(v1.Resource("nodes"), f.node)
		}
		return client.CoreV1().Nodes().Get(ctx, f.node, metav1.GetOptions{})
	}
	ctx, cancel := context.WithCancel(ctx)
	if err := manager.Start(ctx, func() []*v1.Pod { return nil }, getNode, sourcesNeverReady{}); err != nil {
		cancel()
		return nil, fmt.Errorf("start DRA manager: %w", err)
	}
	handler := newRecordingHandler(manager.GetWatcherHandler())
	pm := pluginmanager.NewPluginManager(f.registryDir, &record.FakeRecorder{})
	pm.AddHandler(registerapi.DRAPlugin, handler)
	done := make(chan struct{})
	go func() {
		defer close(done)
		pm.Run(ctx, sourcesNeverReady{}, ctx.Done())
	}()
	return &kubeletSide{client: client, manager: manager, handler: handler, cancel: cancel, done: done}, nil
}

func (k *kubeletSide) stop() {
	k.manager.Stop()
	k.cancel()
	select {
	case <-k.done:
	case <-time.After(5 * time.Second):
	}
}

func (k *kubeletSide) events() []regEvent {
	events, _ := k.handler.snapshot()
	if events == nil {
		events = []regEvent{}
	}
	return events
}

func runRegister(args []string) (map[string]any, error) {
	f := newKubeletFlags("register")
	if err := f.parse(args); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	k, err := startKubeletSide(ctx, f)
	if err != nil {
		return nil, wrapErr(exitFailed, err)
	}
	defer k.stop()
	err = k.handler.waitRegistered(ctx, f.drivers)
	doc := map[string]any{"events": k.events(), "registered": err == nil}
	return doc, wrapErr(exitFailed, err)
}

// splitPod parses namespace/name.
func splitPod(ref string) (string, string, error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" {
		return "", "", failf(exitUsage, "--pod must be namespace/name, got %q", ref)
	}
	return ns, name, nil
}

// waitForBoundPod polls until the pod is bound (to --node if given) and every
// pod claim name can be resolved (template claims need the resourceclaim
// controller to have written pod.status.resourceClaimStatuses).
func waitForBoundPod(ctx context.Context, client kubernetes.Interface, ns, name, node string) (*v1.Pod, error) {
	var pod *v1.Pod
	var lastReason string
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			lastReason = err.Error()
			return false, nil
		}
		pod = p
		switch {
		case p.Spec.NodeName == "":
			lastReason = "pod is not scheduled yet"
			return false, nil
		case node != "" && p.Spec.NodeName != node:
			return false, failf(exitFailed, "pod %s/%s is bound to node %q, not %q", ns, name, p.Spec.NodeName, node)
		}
		for i := range p.Spec.ResourceClaims {
			claimName, _, err := resourceclaim.Name(p, &p.Spec.ResourceClaims[i])
			if err != nil || claimName == nil {
				lastReason = fmt.Sprintf("claim %q not resolvable yet: %v", p.Spec.ResourceClaims[i].Name, err)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		var ce *cliError
		if errors.As(err, &ce) {
			return pod, err
		}
		return pod, failf(exitTimeout, "waiting for pod %s/%s: %s", ns, name, lastReason)
	}
	return pod, nil
}

// driversOfPod returns the drivers named in the allocation results of the
// pod's claims, the same set the kubelet looks up before preparing.
func driversOfPod(ctx context.Context, client kubernetes.Interface, pod *v1.Pod) ([]string, error) {
	set := map[string]bool{}
	for i := range pod.Spec.ResourceClaims {
		claimName, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil || claimName == nil {
			continue
		}
		claim, err := client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *claimName, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get ResourceClaim %s: %w", *claimName, err)
		}
		if claim.Status.Allocation == nil {
			continue
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			set[r.Driver] = true
		}
	}
	drivers := make([]string, 0, len(set))
	for d := range set {
		drivers = append(drivers, d)
	}
	sort.Strings(drivers)
	return drivers, nil
}

type deviceOut struct {
	Pool         string   `json:"pool"`
	Device       string   `json:"device"`
	RequestNames []string `json:"request_names"`
	CDIDeviceIDs []string `json:"cdi_device_ids"`
	ShareID      *string  `json:"share_id"`
}

type claimOut struct {
	Namespace string                    `json:"namespace"`
	Name      string                    `json:"name"`
	UID       string                    `json:"uid"`
	Drivers   map[string]map[string]any `json:"drivers"`
}

type containerOut struct {
	CDIDevices []string   `json:"cdi_devices"`
	Claims     []claimOut `json:"claims"`
}

func describeContainer(m *dra.Manager, pod *v1.Pod, c *v1.Container) (containerOut, error) {
	out := containerOut{CDIDevices: []string{}, Claims: []claimOut{}}
	info, err := m.GetResources(pod, c)
	if err != nil {
		return out, fmt.Errorf("GetResources for container %s: %w", c.Name, err)
	}
	for _, d := range info.CDIDevices {
		out.CDIDevices = append(out.CDIDevices, d.Name)
	}
	claimInfos, err := m.GetContainerClaimInfos(pod, c)
	if err != nil {
		return out, fmt.Errorf("GetContainerClaimInfos for container %s: %w", c.Name, err)
	}
	for _, ci := range claimInfos {
		co := claimOut{Namespace: ci.Namespace, Name: ci.ClaimName, UID: string(ci.ClaimUID), Drivers: map[string]map[string]any{}}
		for driver, ds := range ci.DriverState {
			devices := []deviceOut{}
			for _, d := range ds.Devices {
				var share *string
				if d.ShareID != nil {
					s := string(*d.ShareID)
					share = &s
				}
				devices = append(devices, deviceOut{
					Pool: d.PoolName, Device: d.DeviceName, ShareID: share,
					RequestNames: nonNil(d.RequestNames), CDIDeviceIDs: nonNil(d.CDIDeviceIDs),
				})
			}
			co.Drivers[driver] = map[string]any{"devices": devices, "skip_node_operations": ds.SkipNodeOperations}
		}
		out.Claims = append(out.Claims, co)
	}
	return out, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func runPrepare(args []string) (map[string]any, error) {
	f := newKubeletFlags("prepare")
	podRef := f.fs.String("pod", "", "namespace/name of a pod bound to --node")
	if err := f.parse(args); err != nil {
		return nil, err
	}
	ns, name, err := splitPod(*podRef)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	k, err := startKubeletSide(ctx, f)
	if err != nil {
		return nil, wrapErr(exitFailed, err)
	}
	defer k.stop()
	doc := map[string]any{"pod": *podRef}

	pod, err := waitForBoundPod(ctx, k.client, ns, name, f.node)
	if err != nil {
		return doc, err
	}
	doc["uid"] = string(pod.UID)
	doc["node"] = pod.Spec.NodeName
	drivers := f.drivers
	if len(drivers) == 0 {
		if drivers, err = driversOfPod(ctx, k.client, pod); err != nil {
			return doc, wrapErr(exitFailed, err)
		}
	}
	doc["drivers"] = drivers
	if len(drivers) > 0 {
		if err := k.handler.waitRegistered(ctx, drivers); err != nil {
			doc["events"] = k.events()
			return doc, wrapErr(exitFailed, err)
		}
	}
	doc["events"] = k.events()
	if err := k.manager.PrepareResources(ctx, pod); err != nil {
		return doc, wrapErr(exitFailed, err)
	}
	containers := map[string]containerOut{}
	initContainers := map[string]containerOut{}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if initContainers[c.Name], err = describeContainer(k.manager, pod, c); err != nil {
			return doc, wrapErr(exitFailed, err)
		}
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if containers[c.Name], err = describeContainer(k.manager, pod, c); err != nil {
			return doc, wrapErr(exitFailed, err)
		}
	}
	doc["containers"] = containers
	doc["init_containers"] = initContainers
	return doc, nil
}

func runUnprepare(args []string) (map[string]any, error) {
	f := newKubeletFlags("unprepare")
	podRef := f.fs.String("pod", "", "namespace/name of the pod")
	podUID := f.fs.String("pod-uid", "", "UID of the pod; lets unprepare work after the pod object is gone (same --state-dir as prepare)")
	if err := f.parse(args); err != nil {
		return nil, err
	}
	ns, name, err := splitPod(*podRef)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	k, err := startKubeletSide(ctx, f)
	if err != nil {
		return nil, wrapErr(exitFailed, err)
	}
	defer k.stop()
	doc := map[string]any{"pod": *podRef, "unprepared": false}

	pod, err := k.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil && *podUID != "" && string(pod.UID) != *podUID:
		pod = &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(*podUID)}}
	case apierrors.IsNotFound(err) && *podUID != "":
		pod = &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(*podUID)}}
	case err != nil:
		return doc, wrapErr(exitFailed, fmt.Errorf("get pod %s: %w", *podRef, err))
	}
	doc["uid"] = string(pod.UID)
	drivers := f.drivers
	if len(drivers) == 0 && pod.Spec.NodeName != "" {
		if drivers, err = driversOfPod(ctx, k.client, pod); err != nil {
			return doc, wrapErr(exitFailed, err)
		}
	}
	doc["drivers"] = drivers
	if err := k.handler.waitRegistered(ctx, drivers); err != nil {
		doc["events"] = k.events()
		return doc, wrapErr(exitFailed, err)
	}
	doc["events"] = k.events()
	if err := k.manager.UnprepareResources(ctx, pod); err != nil {
		return doc, wrapErr(exitFailed, err)
	}
	doc["unprepared"] = true
	return doc, nil
}

func runPodHealth(args []string) (map[string]any, error) {
	f := newKubeletFlags("pod-health")
	podRef := f.fs.String("pod", "", "namespace/name of a prepared pod (same --state-dir as prepare)")
	waitFor := f.fs.Duration("wait", 5*time.Second, "how long the kubelet-side health stream runs before the status is computed")
	if err := f.parse(args); err != nil {
		return nil, err
	}
	ns, name, err := splitPod(*podRef)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	k, err := startKubeletSide(ctx, f)
	if err != nil {
		return nil, wrapErr(exitFailed, err)
	}
	defer k.stop()
	doc := map[string]any{"pod": *podRef}
	pod, err := k.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return doc, wrapErr(exitFailed, fmt.Errorf("get pod %s: %w", *podRef, err))
	}
	drivers := f.drivers
	if len(drivers) == 0 {
		if drivers, err = driversOfPod(ctx, k.client, pod); err != nil {
			return doc, wrapErr(exitFailed, err)
		}
	}
	if err := k.handler.waitRegistered(ctx, drivers); err != nil {
		doc["events"] = k.events()
		return doc, wrapErr(exitFailed, err)
	}
	doc["events"] = k.events()
	select {
	case <-time.After(*waitFor):
	case <-ctx.Done():
		return doc, failf(exitTimeout, "deadline reached before --wait elapsed")
	}
	st := &v1.PodStatus{}
	for _, c := range pod.Spec.InitContainers {
		st.InitContainerStatuses = append(st.InitContainerStatuses, v1.ContainerStatus{Name: c.Name})
	}
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, v1.ContainerStatus{Name: c.Name})
	}
	k.manager.UpdateAllocatedResourcesStatus(klog.FromContext(ctx), pod, st)
	out := map[string]any{}
	for _, cs := range append(st.InitContainerStatuses, st.ContainerStatuses...) {
		statuses := cs.AllocatedResourcesStatus
		if statuses == nil {
			statuses = []v1.ResourceStatus{}
		}
		out[cs.Name] = statuses
	}
	doc["allocated_resources_status"] = out
	return doc, nil
}
