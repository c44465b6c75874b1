package hrlscore

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	pb "github.com/hrl-scheduler/hrl-scheduler/scheduler-plugin/pkg/proto/embeddingsv1"
	"github.com/hrl-scheduler/hrl-scheduler/scheduler-plugin/pkg/scoretable"
)

// testTable: 40 nodes, 3 services, bases that differ per service and node, a load term that bites on the busy nodes.
func testTable(t *testing.T) (*pb.ScoreTable, *scoretable.Table) {
	t.Helper()
	m := benchTable(40, 3)
	m.CpuUsedM = f64s(40, func(i int) float64 { return float64(800 * i) })
	tb, err := scoretable.Decode(m, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return m, tb
}

func nodeWith(name string, requestedMilli int64) fwk.NodeInfo {
	ni := framework.NewNodeInfo()
	ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if requestedMilli > 0 {
		ni.AddPod(&v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "placed-" + name, Namespace: "x", UID: types.UID("u-" + name)},
			Spec: v1.PodSpec{NodeName: name, Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
				Requests: v1.ResourceList{v1.ResourceCPU: *resource.NewMilliQuantity(requestedMilli, resource.DecimalSI)},
			}}}},
		})
	}
	return ni
}

func testPlugin(tb *scoretable.Table, now func() time.Time) *Plugin {
	return &Plugin{watcher: fixed{tb}, maxAge: 30 * time.Second, now: now, m: registerMetrics()}
}

// scoresOf runs one cycle (PreScore, Score on every node, NormalizeScore); nil when PreScore skips.
func scoresOf(t *testing.T, p *Plugin, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) []int64 {
	t.Helper()
	ctx := context.Background()
	if st := p.PreScore(ctx, state, pod, nodes); !st.IsSuccess() {
		if !st.IsSkip() {
			t.Fatalf("PreScore: %v", st)
		}
		return nil
	}
	return scoreAll(t, p, state, pod, nodes)
}

func scoreAll(t *testing.T, p *Plugin, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) []int64 {
	t.Helper()
	ctx := context.Background()
	list := make(fwk.NodeScoreList, len(nodes))
	for i, ni := range nodes {
		s, st := p.Score(ctx, state, pod, ni)
		if !st.IsSuccess() {
			t.Fatalf("Score: %v", st)
		}
		list[i] = fwk.NodeScore{Name: ni.Node().Name, Score: s}
	}
	if st := p.NormalizeScore(ctx, state, pod, list); !st.IsSuccess() {
		t.Fatalf("NormalizeScore: %v", st)
	}
	out := make([]int64, len(list))
	for i := range list {
		out[i] = list[i].Score
	}
	return out
}

// want is the table's arithmetic for the pod, node by node, x 10 (what the extender's reply weighs); 0 for a node the
// table does not list.
func want(tb *scoretable.Table, pod *v1.Pod, nodes []fwk.NodeInfo) []int64 {
	k := scoretable.KeyOf(pod)
	row := tb.Row(k)
	out := make([]int64, len(nodes))
	for i, ni := range nodes {
		if pos, ok := tb.Position(ni.Node().Name); ok {
			out[i] = 10 * tb.Score(row, pos, k.CPUMilli, ni.GetRequested().GetMilliCPU())
		}
	}
	return out
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestACycleScoresEachNodeAsTheTableWithTheSchedulersRequestedCPU(t *testing.T) {
	m, tb := testTable(t)
	p := testPlugin(tb, time.Now)
	nodes := []fwk.NodeInfo{}
	for i, name := range m.Nodes {
		nodes = append(nodes, nodeWith(name, int64(300*(i%5)))) // pods placed since the table on some nodes
	}
	nodes = append(nodes, nodeWith("not-in-the-table", 0))
	distinct := map[int64]bool{}
	for _, svc := range []string{"svc-00", "svc-01", "svc-02"} {
		pod := benchPod(svc)
		got := scoresOf(t, p, framework.NewCycleState(), pod, nodes)
		if w := want(tb, pod, nodes); !equal(got, w) {
			t.Errorf("%s: got %v, want %v", svc, got, w)
		}
		if got[len(got)-1] != 0 {
			t.Errorf("%s: a node the table does not list scores 0, got %d", svc, got[len(got)-1])
		}
		for _, s := range got {
			distinct[s] = true
		}
	}
	if len(distinct) < 4 {
		t.Errorf("the test table should give varied scores, got %v", distinct)
	}
}

func TestInterleavedAndClonedCyclesEachGetTheirOwnRow(t *testing.T) {
	m, tb := testTable(t)
	p := testPlugin(tb, time.Now)
	var nodes []fwk.NodeInfo
	for _, name := range m.Nodes {
		nodes = append(nodes, nodeWith(name, 0))
	}
	a, b := benchPod("svc-00"), benchPod("svc-02")
	sa, sb := framework.NewCycleState(), framework.NewCycleState()
	ctx := context.Background()
	if !p.PreScore(ctx, sa, a, nodes).IsSuccess() || !p.PreScore(ctx, sb, b, nodes).IsSuccess() {
		t.Fatal("PreScore skipped")
	}
	// b's cycle wrote last; a's state is read from its CycleState, b's found by identity, a clone of a's by reading
	if got, w := scoreAll(t, p, sa, a, nodes), want(tb, a, nodes); !equal(got, w) {
		t.Errorf("a after b's PreScore: got %v, want %v", got, w)
	}
	if got, w := scoreAll(t, p, sb, b, nodes), want(tb, b, nodes); !equal(got, w) {
		t.Errorf("b: got %v, want %v", got, w)
	}
	if got, w := scoreAll(t, p, sa.Clone(), a, nodes), want(tb, a, nodes); !equal(got, w) {
		t.Errorf("a clone of a's state: got %v, want %v", got, w)
	}
	if equal(want(tb, a, nodes), want(tb, b, nodes)) {
		t.Error("the two services should score differently in the test table")
	}
	// a state PreScore never saw: nothing to score with (the framework does not call Score then)
	if s, st := p.Score(ctx, framework.NewCycleState(), a, nodes[0]); s != 0 || !st.IsSuccess() {
		t.Errorf("Score without PreScore: got %d %v, want 0", s, st)
	}
}

func TestNoTableAStaleTableOrNoRowSkipsEveryNode(t *testing.T) {
	m, tb := testTable(t)
	nodes := []fwk.NodeInfo{nodeWith(m.Nodes[0], 0)}
	pod := benchPod("svc-01")
	if got := scoresOf(t, testPlugin(nil, time.Now), framework.NewCycleState(), pod, nodes); got != nil {
		t.Errorf("no table: got %v, want a skip", got)
	}
	later := func() time.Time { return time.Now().Add(31 * time.Second) }
	if got := scoresOf(t, testPlugin(tb, later), framework.NewCycleState(), pod, nodes); got != nil {
		t.Errorf("a table 31 s old with a bound of 30 s: got %v, want a skip", got)
	}
	if got := scoresOf(t, testPlugin(tb, time.Now), framework.NewCycleState(), benchPod("svc-99"), nodes); got != nil {
		t.Errorf("no row for the service: got %v, want a skip", got)
	}
	if got := scoresOf(t, testPlugin(tb, time.Now), framework.NewCycleState(), pod, nodes); got == nil {
		t.Error("a fresh table with the pod's row: got a skip")
	}
}
