package hrlscore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	pb "github.com/hrl-scheduler/hrl-scheduler/scheduler-plugin/pkg/proto/embeddingsv1"
	"github.com/hrl-scheduler/hrl-scheduler/scheduler-plugin/pkg/scoretable"
)

func f64s(n int, f func(i int) float64) []byte {
	b := make([]byte, 8*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(f(i)))
	}
	return b
}

// benchTable is the bench's cluster as the producer publishes it: nodes kwok nodes of 32 CPU, services rows for any
// requests (the heuristic's base reads no requests).
func benchTable(nodes, services int) *pb.ScoreTable {
	m := &pb.ScoreTable{
		Generation: 1, Producer: "bench", Policy: "topology-heuristic",
		AllocCpuM:     f64s(nodes, func(int) float64 { return 32000 }),
		CpuUsedM:      f64s(nodes, func(i int) float64 { return float64(100 * (i % 7)) }),
		RequestedCpuM: f64s(nodes, func(i int) float64 { return float64(100 * (i % 7)) }),
		LoadTerm:      &pb.LoadTerm{Scale: 1, FromFrac: 0.7, Cap: 10},
	}
	for i := 0; i < nodes; i++ {
		m.Nodes = append(m.Nodes, fmt.Sprintf("bench-node-%04d", i))
	}
	for s := 0; s < services; s++ {
		m.Rows = append(m.Rows, &pb.ScoreRow{
			Service: fmt.Sprintf("svc-%02d", s), CpuM: scoretable.AnyRequests, MemoryBytes: scoretable.AnyRequests,
			Weight: 1, Base: f64s(nodes, func(i int) float64 { return float64((i*7+s*3)%11) / 1.1 }),
		})
	}
	return m
}

func benchPod(service string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: service + "-7d9c8b5f4-abcde", Namespace: "bench", Labels: map[string]string{"app": service},
		},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{
				v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("128Mi"),
			},
		}}}},
	}
}

func benchNodes(m *pb.ScoreTable) []fwk.NodeInfo {
	out := make([]fwk.NodeInfo, len(m.Nodes))
	for i, name := range m.Nodes {
		ni := framework.NewNodeInfo()
		ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		out[i] = ni
	}
	return out
}

type fixed struct{ t *scoretable.Table }

func (f fixed) Current() *scoretable.Table { return f.t }

// BenchmarkCycle is one scheduling cycle of the plugin on a 500-node table: PreScore, Score on every node,
// NormalizeScore (what kube-scheduler runs per pod; the framework runs Score on 16 goroutines, here on one).
func BenchmarkCycle(b *testing.B) {
	for _, nodes := range []int{500, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			m := benchTable(nodes, 20)
			tb, err := scoretable.Decode(m, time.Now(), nil)
			if err != nil {
				b.Fatal(err)
			}
			p := &Plugin{watcher: fixed{tb}, maxAge: time.Minute, now: time.Now, m: registerMetrics()}
			infos := benchNodes(m)
			pod := benchPod("svc-07")
			scores := make(fwk.NodeScoreList, len(infos))
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				state := framework.NewCycleState()
				if st := p.PreScore(ctx, state, pod, infos); !st.IsSuccess() {
					b.Fatal(st)
				}
				for j, ni := range infos {
					s, _ := p.Score(ctx, state, pod, ni)
					scores[j] = fwk.NodeScore{Name: m.Nodes[j], Score: s}
				}
				p.NormalizeScore(ctx, state, pod, scores)
				_, _ = p.SignPod(ctx, pod)
			}
		})
	}
}

// BenchmarkDecode is the watch's cost per table received: checking and converting one message.
func BenchmarkDecode(b *testing.B) {
	for _, nodes := range []int{500, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			m := benchTable(nodes, 20)
			prev, _ := scoretable.Decode(m, time.Now(), nil)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := scoretable.Decode(m, time.Now(), prev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
