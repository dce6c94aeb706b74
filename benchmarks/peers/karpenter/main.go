// Command karpenter-peer runs Karpenter's own provisioning scheduler (sigs.k8s.io/karpenter, built from its
// Go module, not re-implemented) on a cluster snapshot: the same JSON document `autoscaler plan` reads
// (docs/snapshot.md). It prints one JSON object: the NodeClaims Karpenter would create, the instance type
// each would launch, total $/hour, the pods left unschedulable and the solve time.
//
// Set-up follows Karpenter's scheduling_benchmark_test.go (fake cloud provider, fake controller-runtime
// client, real state.Cluster, NewTopology + NewScheduler + Solve) with the scheduler options its
// provisioner passes. Instance types are built by the AWS provider's own code (instancetype.NewInstanceType:
// capacity, kube-reserved, system-reserved, eviction thresholds, VM memory overhead) from the snapshot's
// DescribeInstanceTypes output, and their offerings from the snapshot's offerings and prices, the way the
// AWS provider's offering resolver shapes them.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
	"syscall"
	"time"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	awsoptions "github.com/aws/karpenter-provider-aws/pkg/operator/options"
	"github.com/aws/karpenter-provider-aws/pkg/providers/instancetype"
	"github.com/samber/lo"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakecr "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/fake"
	scheduler "sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/events"
	"sigs.k8s.io/karpenter/pkg/operator/injection"
	"sigs.k8s.io/karpenter/pkg/operator/logging"
	"sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/karpenter/pkg/scheduling"
	"sigs.k8s.io/karpenter/pkg/test"
	"sigs.k8s.io/karpenter/pkg/utils/daemonset"
	nodepoolutils "sigs.k8s.io/karpenter/pkg/utils/nodepool"
)

// Versions of the modules this binary is built from; peers.py checks them against go.mod.
const (
	karpenterVersion   = "v1.15.0"
	awsProviderVersion = "v1.15.0"
)

type prices struct {
	OnDemand map[string]float64            `json:"onDemand"`
	Spot     map[string]map[string]float64 `json:"spot"`
}

type snapshot struct {
	Region        string          `json:"region"`
	NodePools     json.RawMessage `json:"nodePools"`
	NodeClasses   json.RawMessage `json:"nodeClasses"`
	Pods          json.RawMessage `json:"pods"`
	Nodes         json.RawMessage `json:"nodes"`
	DaemonSets    json.RawMessage `json:"daemonSets"`
	InstanceTypes json.RawMessage `json:"instanceTypes"`
	Offerings     json.RawMessage `json:"offerings"`
	Prices        prices          `json:"prices"`
}

type nodeClaimOut struct {
	NodePool            string  `json:"nodePool"`
	InstanceType        string  `json:"instanceType"`
	Zone                string  `json:"zone"`
	CapacityType        string  `json:"capacityType"`
	PricePerHour        float64 `json:"pricePerHour"`
	InstanceTypeOptions int     `json:"instanceTypeOptions"`
	// AllowedZones: the zones the NodeClaim's requirements admit (the scheduler pins a zone when a topology
	// constraint needs one); the launch picks its offering among these.
	AllowedZones []string `json:"allowedZones"`
	Pods         []string `json:"pods"`
	// Allocatable: what Karpenter expects of the launched instance type (its Allocatable(): capacity less
	// kube-reserved, system-reserved, eviction threshold and VM overhead), as its in-flight NodeClaim carries it.
	Allocatable map[string]string `json:"allocatable,omitempty"`
}

type unschedulableOut struct {
	Pod   string `json:"pod"`
	Error string `json:"error"`
}

type output struct {
	KarpenterVersion   string              `json:"karpenterVersion"`
	AWSProviderVersion string              `json:"awsProviderVersion"`
	InstanceTypes      int                 `json:"instanceTypes"`
	PendingPods        int                 `json:"pendingPods"`
	ExistingNodes      int                 `json:"existingNodes"`
	NodeClaims         []nodeClaimOut      `json:"nodeClaims"`
	ExistingNodePods   map[string][]string `json:"existingNodePods"`
	TotalPerHour       float64             `json:"totalPerHour"`
	Unschedulable      []unschedulableOut  `json:"unschedulable"`
	SolveSeconds       float64             `json:"solveSeconds"`
	SolveOnlySeconds   float64             `json:"solveOnlySeconds"`
	SolveCPUSeconds    float64             `json:"solveCpuSeconds"`
	Concurrency        int                 `json:"concurrency"`
	// SolveTimeoutSeconds is the bound on Solve (Karpenter's provisioner: one minute); 0 when unbounded.
	SolveTimeoutSeconds float64 `json:"solveTimeoutSeconds"`
	// TimedOut: Solve stopped at the bound. DeferredPods are the pending pods it neither placed nor failed by
	// then: Karpenter leaves them pending for its next provisioning round.
	TimedOut     bool     `json:"timedOut"`
	DeferredPods int      `json:"deferredPods"`
	Assumptions  []string `json:"assumptions"`
}

// items decodes a bare list or an object wrapping one (a kubectl List's "items", a describe response's key).
func items[T any](raw json.RawMessage, wrapper string) ([]T, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []T
	if err := json.Unmarshal(raw, &list); err == nil {
		return list, nil
	}
	var wrapped map[string]json.RawMessage
	if err := json.Unmarshal(raw, &wrapped); err != nil {
		return nil, fmt.Errorf("must be a list or an object with %q: %w", wrapper, err)
	}
	inner, ok := wrapped[wrapper]
	if !ok {
		inner = wrapped["items"]
	}
	if err := json.Unmarshal(inner, &list); err != nil {
		return nil, err
	}
	return list, nil
}

func key(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// kubeletSettings are the EC2NodeClass kubelet fields that change an instance type's allocatable.
type kubeletSettings struct {
	MaxPods        *int32            `json:"maxPods"`
	PodsPerCore    *int32            `json:"podsPerCore"`
	KubeReserved   map[string]string `json:"kubeReserved"`
	SystemReserved map[string]string `json:"systemReserved"`
	EvictionHard   map[string]string `json:"evictionHard"`
	EvictionSoft   map[string]string `json:"evictionSoft"`
}

type nodeClassDoc struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Kubelet          kubeletSettings `json:"kubelet"`
		AMISelectorTerms []struct {
			Alias string `json:"alias"`
		} `json:"amiSelectorTerms"`
	} `json:"spec"`
}

func amiFamily(nc nodeClassDoc) string {
	for _, t := range nc.Spec.AMISelectorTerms {
		switch strings.SplitN(t.Alias, "@", 2)[0] {
		case "al2":
			return awsv1.AMIFamilyAL2
		case "bottlerocket":
			return awsv1.AMIFamilyBottlerocket
		case "windows2019":
			return awsv1.AMIFamilyWindows2019
		case "windows2022":
			return awsv1.AMIFamilyWindows2022
		}
	}
	return awsv1.AMIFamilyAL2023
}

// buildInstanceTypes runs the AWS provider's NewInstanceType on each DescribeInstanceTypes entry and attaches
// offerings shaped like its offering resolver's: one per zone and capacity type with a known price.
func buildInstanceTypes(ctx context.Context, snap snapshot, nc nodeClassDoc) ([]*cloudprovider.InstanceType, error) {
	infos, err := items[json.RawMessage](snap.InstanceTypes, "InstanceTypes")
	if err != nil {
		return nil, fmt.Errorf("instanceTypes: %w", err)
	}
	type location struct {
		InstanceType string `json:"InstanceType"`
		Location     string `json:"Location"`
	}
	locs, err := items[location](snap.Offerings, "InstanceTypeOfferings")
	if err != nil {
		return nil, fmt.Errorf("offerings: %w", err)
	}
	zones := map[string][]string{}
	regionZones := map[string]bool{}
	for _, l := range locs {
		zones[l.InstanceType] = append(zones[l.InstanceType], l.Location)
		regionZones[l.Location] = true
	}
	// The EC2NodeClass's subnets: one in every zone of the region (the provider intersects these with
	// the zones each type is offered in).
	var subnetZones []awsv1.ZoneInfo
	for _, z := range lo.Keys(regionZones) {
		subnetZones = append(subnetZones, awsv1.ZoneInfo{Zone: z})
	}
	sort.Slice(subnetZones, func(i, j int) bool { return subnetZones[i].Zone < subnetZones[j].Zone })
	var out []*cloudprovider.InstanceType
	for i, raw := range infos {
		var info ec2types.InstanceTypeInfo
		if err := json.Unmarshal(raw, &info); err != nil {
			return nil, fmt.Errorf("instanceTypes[%d]: %w", i, err)
		}
		name := string(info.InstanceType)
		if info.VCpuInfo == nil || info.MemoryInfo == nil || info.ProcessorInfo == nil || len(zones[name]) == 0 {
			continue
		}
		k := nc.Spec.Kubelet
		it := instancetype.NewInstanceType(ctx, info, snap.Region, zones[name], subnetZones, nil, nil, nil,
			k.MaxPods, k.PodsPerCore, k.KubeReserved, k.SystemReserved, k.EvictionHard, k.EvictionSoft,
			amiFamily(nc), nil)
		usage := lo.Map(info.SupportedUsageClasses, func(u ec2types.UsageClassType, _ int) string { return string(u) })
		for _, zone := range zones[name] {
			if p, ok := snap.Prices.OnDemand[name]; ok && lo.Contains(usage, "on-demand") {
				it.Offerings = append(it.Offerings, offering(v1.CapacityTypeOnDemand, zone, p))
			}
			if p, ok := snap.Prices.Spot[zone][name]; ok && lo.Contains(usage, "spot") {
				it.Offerings = append(it.Offerings, offering(v1.CapacityTypeSpot, zone, p))
			}
		}
		if len(it.Offerings) > 0 {
			out = append(out, it)
		}
	}
	return out, nil
}

func offering(capacityType, zone string, price float64) *cloudprovider.Offering {
	return &cloudprovider.Offering{
		Requirements: scheduling.NewRequirements(
			scheduling.NewRequirement(v1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, capacityType),
			scheduling.NewRequirement(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, zone),
			scheduling.NewRequirement(cloudprovider.ReservationIDLabel, corev1.NodeSelectorOpDoesNotExist),
			scheduling.NewRequirement(awsv1.LabelCapacityReservationType, corev1.NodeSelectorOpDoesNotExist),
			scheduling.NewRequirement(awsv1.LabelCapacityReservationInterruptible, corev1.NodeSelectorOpDoesNotExist),
		),
		Price:     price,
		Available: true,
	}
}

// daemonSetPods mirrors the provisioner's getDaemonSetPods: a pod from each template, with the template's
// required node affinity (the DaemonSet controller overrides it on real pods).
func daemonSetPods(dss []appsv1.DaemonSet) []*corev1.Pod {
	return lo.Map(dss, func(d appsv1.DaemonSet, _ int) *corev1.Pod {
		pod := daemonset.PodForDaemonSet(&d)
		if a := d.Spec.Template.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
			if pod.Spec.Affinity == nil {
				pod.Spec.Affinity = &corev1.Affinity{}
			}
			if pod.Spec.Affinity.NodeAffinity == nil {
				pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
			}
			pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		}
		return pod
	})
}

func run(in io.Reader, concurrency, fakeTypes int, solveTimeout time.Duration) (*output, error) {
	var snap snapshot
	dec := json.NewDecoder(in)
	if err := dec.Decode(&snap); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	ctx := options.ToContext(injection.WithControllerName(context.Background(), "provisioner"), test.Options())
	ctx = awsoptions.ToContext(ctx, &awsoptions.Options{VMMemoryOverheadPercent: 0.075})

	classes, err := items[nodeClassDoc](snap.NodeClasses, "items")
	if err != nil {
		return nil, fmt.Errorf("nodeClasses: %w", err)
	}
	nc := nodeClassDoc{}
	if len(classes) > 0 {
		nc = classes[0]
	}
	instanceTypes, err := buildInstanceTypes(ctx, snap, nc)
	if err != nil {
		return nil, err
	}
	if fakeTypes > 0 {
		// Diagnosis only: Karpenter's own benchmark catalogue (fake.InstanceTypes) in place of the snapshot's, to
		// tell the catalogue's share of the solve time from the harness's.
		instanceTypes = fake.InstanceTypes(fakeTypes)
	}
	pools, err := items[*v1.NodePool](snap.NodePools, "items")
	if err != nil {
		return nil, fmt.Errorf("nodePools: %w", err)
	}
	for _, np := range pools {
		if np.UID == "" {
			np.UID = types.UID("nodepool-" + np.Name)
		}
	}
	nodepoolutils.OrderByWeight(pools)
	byPool := map[string][]*cloudprovider.InstanceType{}
	for _, np := range pools {
		byPool[np.Name] = instanceTypes
	}
	pods, err := items[*corev1.Pod](snap.Pods, "items")
	if err != nil {
		return nil, fmt.Errorf("pods: %w", err)
	}
	nodes, err := items[*corev1.Node](snap.Nodes, "items")
	if err != nil {
		return nil, fmt.Errorf("nodes: %w", err)
	}
	dss, err := items[appsv1.DaemonSet](snap.DaemonSets, "items")
	if err != nil {
		return nil, fmt.Errorf("daemonSets: %w", err)
	}

	cloudProvider := fake.NewCloudProvider()
	cloudProvider.InstanceTypes = instanceTypes
	// The operator's field indexes that the cluster state's lookups use (pkg/operator/operator.go).
	kube := fakecr.NewClientBuilder().
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string {
			return []string{o.(*corev1.Pod).Spec.NodeName}
		}).
		WithIndex(&corev1.Node{}, "spec.providerID", func(o client.Object) []string {
			return []string{o.(*corev1.Node).Spec.ProviderID}
		}).
		Build()
	clk := &clock.RealClock{}
	cluster := state.NewCluster(clk, kube, cloudProvider)
	for _, n := range nodes {
		if n.Spec.ProviderID == "" {
			n.Spec.ProviderID = n.Name
		}
		if err := kube.Create(ctx, n); err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Name, err)
		}
		if err := cluster.UpdateNode(ctx, n); err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	var pending []*corev1.Pod
	for _, p := range pods {
		if p.Namespace == "" {
			p.Namespace = "default"
		}
		if p.UID == "" {
			p.UID = types.UID(key(p)) // the scheduler caches per-pod data by UID
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if p.Spec.NodeName == "" {
			pending = append(pending, p)
			continue
		}
		if err := kube.Create(ctx, p); err != nil {
			return nil, fmt.Errorf("pod %s: %w", key(p), err)
		}
		if err := cluster.UpdatePod(ctx, p); err != nil {
			return nil, fmt.Errorf("pod %s: %w", key(p), err)
		}
	}
	stateNodes := cluster.DeepCopyNodes()
	opts := []scheduler.Options{
		scheduler.DisableReservedCapacityFallback,
		scheduler.NumConcurrentReconciles(concurrency),
		scheduler.MinValuesPolicy(options.FromContext(ctx).MinValuesPolicy),
	}

	cpuStart := cpuSeconds()
	start := time.Now()
	topology, err := scheduler.NewTopology(ctx, kube, cluster, stateNodes, pools, byPool, pending, opts...)
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	s := scheduler.NewScheduler(ctx, kube, pools, cluster, stateNodes, topology, byPool, daemonSetPods(dss),
		events.NewRecorder(&record.FakeRecorder{}), clk, nil, nil, opts...)
	solveStart := time.Now()
	solveCtx, cancel := ctx, context.CancelFunc(func() {})
	if solveTimeout > 0 {
		// As the provisioner's Schedule: Solve under a one-minute context; what it placed by then is launched,
		// the rest stays pending for the next round.
		solveCtx, cancel = context.WithTimeout(ctx, solveTimeout)
	}
	results, err := s.Solve(solveCtx, pending)
	cancel()
	timedOut := errors.Is(err, context.DeadlineExceeded)
	if err != nil && !timedOut {
		return nil, fmt.Errorf("solve: %w", err)
	}
	results = results.TruncateInstanceTypes(ctx, scheduler.MaxInstanceTypes)
	end := time.Now()
	cpuEnd := cpuSeconds()

	out := &output{
		KarpenterVersion: karpenterVersion, AWSProviderVersion: awsProviderVersion,
		InstanceTypes: len(instanceTypes), PendingPods: len(pending), ExistingNodes: len(stateNodes),
		ExistingNodePods: map[string][]string{}, NodeClaims: []nodeClaimOut{}, Unschedulable: []unschedulableOut{},
		SolveSeconds: end.Sub(start).Seconds(), SolveOnlySeconds: end.Sub(solveStart).Seconds(), SolveCPUSeconds: cpuEnd - cpuStart, Concurrency: concurrency,
		SolveTimeoutSeconds: solveTimeout.Seconds(), TimedOut: timedOut,
		Assumptions: []string{
			"scheduler set up as Karpenter's scheduling_benchmark_test.go (fake cloud provider and client, real state.Cluster)",
			"scheduler options as Karpenter's provisioner passes them (reserved-capacity fallback off, default minValues policy)",
			"instance types from the AWS provider's NewInstanceType on the snapshot's DescribeInstanceTypes (VM memory overhead 7.5%)",
			"launch picks the cheapest available offering compatible with each NodeClaim's requirements",
			"solveSeconds covers NewTopology + NewScheduler + Solve + TruncateInstanceTypes (wall clock); solveCpuSeconds the process's CPU time over the same span, all threads",
			"with solveTimeoutSeconds > 0, Solve runs under that context deadline as the provisioner's (one minute in sigs.k8s.io/karpenter's provisioner.go); deferredPods are left for its next round",
		},
	}
	placed := len(results.PodErrors)
	for _, n := range results.ExistingNodes {
		placed += len(n.Pods)
		if len(n.Pods) > 0 {
			out.ExistingNodePods[n.Name()] = lo.Map(n.Pods, func(p *corev1.Pod, _ int) string { return key(p) })
		}
	}
	for _, claim := range results.NewNodeClaims {
		placed += len(claim.Pods)
		best, bestType, bestIT := (*cloudprovider.Offering)(nil), "", (*cloudprovider.InstanceType)(nil)
		for _, it := range claim.InstanceTypeOptions {
			o := it.Offerings.Available().Compatible(claim.Requirements).Cheapest()
			if o != nil && (best == nil || o.Price < best.Price || (o.Price == best.Price && it.Name < bestType)) {
				best, bestType, bestIT = o, it.Name, it
			}
		}
		row := nodeClaimOut{NodePool: claim.NodePoolName, InstanceTypeOptions: len(claim.InstanceTypeOptions),
			AllowedZones: allowedZones(claim.Requirements, claim.InstanceTypeOptions),
			Pods:         lo.Map(claim.Pods, func(p *corev1.Pod, _ int) string { return key(p) })}
		if best != nil {
			row.InstanceType, row.PricePerHour = bestType, best.Price
			row.Zone = best.Requirements.Get(corev1.LabelTopologyZone).Any()
			row.CapacityType = best.Requirements.Get(v1.CapacityTypeLabelKey).Any()
			row.Allocatable = map[string]string{}
			for name, q := range bestIT.Allocatable() {
				row.Allocatable[string(name)] = q.String()
			}
			out.TotalPerHour += best.Price
		}
		out.NodeClaims = append(out.NodeClaims, row)
	}
	for p, err := range results.PodErrors {
		out.Unschedulable = append(out.Unschedulable, unschedulableOut{Pod: key(p), Error: err.Error()})
	}
	sort.Slice(out.Unschedulable, func(i, j int) bool { return out.Unschedulable[i].Pod < out.Unschedulable[j].Pod })
	out.DeferredPods = len(pending) - placed
	out.TotalPerHour = math.Round(out.TotalPerHour*1e6) / 1e6
	return out, nil
}

// allowedZones lists the zones a NodeClaim's requirements admit among its instance types' offerings.
func allowedZones(reqs scheduling.Requirements, its []*cloudprovider.InstanceType) []string {
	zones := map[string]bool{}
	for _, it := range its {
		for _, o := range it.Offerings.Available().Compatible(reqs) {
			zones[o.Requirements.Get(corev1.LabelTopologyZone).Any()] = true
		}
	}
	out := lo.Keys(zones)
	sort.Strings(out)
	return out
}

// cpuSeconds is the CPU time (user + system) this process has used so far, all threads.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return math.NaN()
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func main() {
	log.SetLogger(logging.NopLogger)
	input := flag.String("input", "-", "snapshot JSON file ('-' for stdin)")
	concurrency := flag.Int("concurrency", 5, "scheduler.NumConcurrentReconciles (Karpenter's benchmark uses 5)")
	fakeTypes := flag.Int("fake-instance-types", 0, "diagnosis: use Karpenter's fake.InstanceTypes(N) instead of the snapshot's catalogue")
	solveTimeout := flag.Duration("solve-timeout", 0, "bound Solve as Karpenter's provisioner does (1m); 0: unbounded")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "karpenter-peer:", err)
			os.Exit(2)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "karpenter-peer:", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	var in io.Reader = os.Stdin
	if *input != "-" {
		f, err := os.Open(*input)
		if err != nil {
			fmt.Fprintln(os.Stderr, "karpenter-peer:", err)
			os.Exit(2)
		}
		defer f.Close()
		in = f
	}
	out, err := run(in, *concurrency, *fakeTypes, *solveTimeout)
	if err == nil {
		err = json.NewEncoder(os.Stdout).Encode(out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "karpenter-peer:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}
