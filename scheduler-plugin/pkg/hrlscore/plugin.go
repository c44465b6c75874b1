// Package hrlscore is the HRLScore scheduler-framework plugin: hrl-scheduler's placement scores inside
// kube-scheduler, with no HTTP round trip per pod. It keeps no policy of its own: the hrl-extender process computes
// the node-score table (policy/lowlevel/scoretable.py) and publishes it to the embedding cache, which streams it to
// every watching scheduler (WatchScoreTable); the plugin applies the per-pod load term with the scheduler's view of
// each node and answers exactly what the extender would have answered (package scoretable).
//
//   - PreScore, once per scheduling cycle: the pod's row (its service and requests); Skip, so every node scores the
//     same (neutral: the other plugins decide), when there is no table, when the table is older than
//     maxTableAgeSeconds, or when it has no row for the pod.
//   - Score, per feasible node: the row's score of the node, 0..10, as the extender's reply; 0 for a node the table
//     does not list.
//   - NormalizeScore: x 10 (MaxNodeScore / MaxExtenderPriority), so that a plugin weight of W weighs exactly as an
//     extender of weight W (kube-scheduler multiplies extender scores by MaxNodeScore / MaxExtenderPriority).
//   - SignPod: the row key, so opportunistic batching (KEP-5598) stays on, which an extender turns off.
//
// Modelled on the kubernetes-sigs/scheduler-plugins pattern (out of tree, app.WithPlugin) and on the load-aware
// plugins fed by a component outside the scheduler (Trimaran's load-watcher, Koordinator's LoadAware with its
// staleness bound).
package hrlscore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/hrl-scheduler/hrl-scheduler/scheduler-plugin/pkg/scoretable"
)

// Name is the plugin's name in KubeSchedulerConfiguration.
const Name = "HRLScore"

// Version is the plugin's version, set at link time (hack/build-scheduler-plugin.sh).
var Version = "dev"

const stateKey fwk.StateKey = "PreScore" + Name

// Args are the plugin's arguments (pluginConfig[].args).
type Args struct {
	// CacheAddress is host:port of the embedding cache's gRPC endpoint (hrl-policy cache serve). Required.
	CacheAddress string `json:"cacheAddress"`
	// MaxTableAgeSeconds: a table whose cluster snapshot is older than this scores neutral. Default 30.
	MaxTableAgeSeconds *float64 `json:"maxTableAgeSeconds,omitempty"`
}

// DefaultMaxTableAgeSeconds is MaxTableAgeSeconds when unset.
const DefaultMaxTableAgeSeconds = 30.0

// Plugin is the HRLScore plugin.
type Plugin struct {
	watcher tableSource
	maxAge  time.Duration
	now     func() time.Time
	m       *pluginMetrics
	// last is the state PreScore wrote last, with the cycle's own CycleState: Score finds it by pointer identity
	// instead of the CycleState's sync.Map (a fifth of a node's Score), and falls back to the map otherwise.
	last atomic.Pointer[cycleState]
}

var (
	_ fwk.PreScorePlugin = &Plugin{}
	_ fwk.ScorePlugin    = &Plugin{}
	_ fwk.SignPlugin     = &Plugin{}
)

// tableSource is where the plugin reads the current table (a *scoretable.Watcher; tests: a fixed table).
type tableSource interface{ Current() *scoretable.Table }

// New builds the plugin from its arguments and starts its table watch (it ends with ctx).
func New(ctx context.Context, obj runtime.Object, _ fwk.Handle) (fwk.Plugin, error) {
	args, err := decodeArgs(obj)
	if err != nil {
		return nil, fmt.Errorf("%s: args: %w", Name, err)
	}
	maxAge, err := validate(*args)
	if err != nil {
		return nil, err
	}
	m := registerMetrics()
	w, err := sharedWatcher(ctx, args.CacheAddress, m)
	if err != nil {
		return nil, fmt.Errorf("%s: args.%w", Name, err)
	}
	klog.InfoS("hrl-score: scoring from the score table", "cache", args.CacheAddress, "maxTableAge", maxAge,
		"version", Version)
	return &Plugin{watcher: w, maxAge: maxAge, now: time.Now, m: m}, nil
}

var (
	watchersMu sync.Mutex
	watchers   = map[string]*scoretable.Watcher{}
)

// sharedWatcher is the one watch of address in this process (profiles naming the same cache share it), started
// with the first profile's context.
func sharedWatcher(ctx context.Context, address string, m *pluginMetrics) (*scoretable.Watcher, error) {
	watchersMu.Lock()
	defer watchersMu.Unlock()
	if w := watchers[address]; w != nil {
		return w, nil
	}
	host, _ := os.Hostname()
	w, err := scoretable.NewWatcher(address, "kube-scheduler@"+host, m)
	if err != nil {
		return nil, err
	}
	watchers[address] = w
	m.bindAge(func() float64 {
		if t := w.Current(); t != nil {
			return t.Age(time.Now()).Seconds()
		}
		return -1
	})
	go w.Run(ctx)
	return w, nil
}

// decodeArgs decodes pluginConfig[].args strictly: a misspelt field is an error naming it, not a silent default.
func decodeArgs(obj runtime.Object) (*Args, error) {
	args := &Args{}
	u, ok := obj.(*runtime.Unknown)
	if !ok || u.Raw == nil || (u.ContentType != "" && u.ContentType != runtime.ContentTypeJSON) {
		return args, frameworkruntime.DecodeInto(obj, args)
	}
	dec := json.NewDecoder(bytes.NewReader(u.Raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(args); err != nil {
		return nil, err
	}
	return args, nil
}

func validate(a Args) (time.Duration, error) {
	host, port, err := net.SplitHostPort(a.CacheAddress)
	if err != nil || host == "" {
		return 0, fmt.Errorf("%s: args.cacheAddress: expected host:port, got %q", Name, a.CacheAddress)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return 0, fmt.Errorf("%s: args.cacheAddress: port must be 1..65535, got %q", Name, a.CacheAddress)
	}
	age := DefaultMaxTableAgeSeconds
	if a.MaxTableAgeSeconds != nil {
		age = *a.MaxTableAgeSeconds
	}
	if !(age > 0 && age <= 86400) {
		return 0, fmt.Errorf("%s: args.maxTableAgeSeconds: expected 0 < x <= 86400, got %v", Name, age)
	}
	return time.Duration(age * float64(time.Second)), nil
}

// Name is the plugin's name.
func (p *Plugin) Name() string { return Name }

type cycleState struct {
	table  *scoretable.Table
	row    *scoretable.Row
	podCPU int64                 // the pod's effective CPU request, millicores
	owner  *framework.CycleState // the cycle that wrote it (nil: another CycleState implementation)
}

func (c *cycleState) Clone() fwk.StateData { return c }

// PreScore reads the pod's row once per cycle; Skip (neutral scores) when there is none to read.
func (p *Plugin) PreScore(_ context.Context, state fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	t := p.watcher.Current()
	row, key, outcome := scoretable.Lookup(t, pod, p.now(), p.maxAge)
	p.m.cycle(outcome)
	if row == nil {
		return fwk.NewStatus(fwk.Skip)
	}
	c := &cycleState{table: t, row: row, podCPU: key.CPUMilli}
	c.owner, _ = state.(*framework.CycleState)
	state.Write(stateKey, c)
	if c.owner != nil {
		p.last.Store(c)
	}
	return nil
}

// cycle is what PreScore wrote into state (nil: nothing): the last one written when state is its cycle's, else
// read from state. Only PreScore writes stateKey, so the two always agree.
func (p *Plugin) cycle(state fwk.CycleState) *cycleState {
	if l := p.last.Load(); l != nil && l.owner != nil {
		if s, ok := state.(*framework.CycleState); ok && s == l.owner {
			return l
		}
	}
	d, err := state.Read(stateKey)
	if err != nil {
		return nil
	}
	c, _ := d.(*cycleState)
	return c
}

// Score is the extender's reply for the node, 0..10 (0 for a node the table does not list).
func (p *Plugin) Score(_ context.Context, state fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	c := p.cycle(state)
	if c == nil {
		return 0, nil // PreScore skipped us (the framework does not call Score then) or another profile's state
	}
	node := nodeInfo.Node()
	if node == nil {
		return 0, nil
	}
	pos, ok := c.table.Position(node.Name)
	if !ok {
		p.m.unknownNode()
		return 0, nil
	}
	return c.table.Score(c.row, pos, c.podCPU, nodeInfo.GetRequested().GetMilliCPU()), nil
}

// ScoreExtensions is the plugin itself (NormalizeScore).
func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return p }

// NormalizeScore maps 0..MaxExtenderPriority to 0..MaxNodeScore, as kube-scheduler does with extender scores.
func (p *Plugin) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	const k = fwk.MaxNodeScore / scoretable.MaxExtenderPriority
	for i := range scores {
		s := scores[i].Score
		if s < 0 {
			s = 0
		} else if s > scoretable.MaxExtenderPriority {
			s = scoretable.MaxExtenderPriority
		}
		scores[i].Score = s * k
	}
	return nil
}

// SignPod: pods with the same row get the same scores on the same nodes.
func (p *Plugin) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return []fwk.SignFragment{{Key: "hrl-scheduler.io/score-row", Value: scoretable.KeyOf(pod).String()}}, nil
}
