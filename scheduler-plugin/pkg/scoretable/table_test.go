package scoretable

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pb "github.com/hrl-scheduler/hrl-scheduler/scheduler-plugin/pkg/proto/embeddingsv1"
)

func f64(vs ...float64) []byte {
	b := make([]byte, 8*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
	}
	return b
}

func table() *pb.ScoreTable {
	return &pb.ScoreTable{
		Generation: 3, Nodes: []string{"n1", "n2"},
		AllocCpuM: f64(1000, 1000), CpuUsedM: f64(500, 0), RequestedCpuM: f64(500, 0),
		LoadTerm: &pb.LoadTerm{Scale: 1, FromFrac: 0.7, Cap: 10},
		Rows: []*pb.ScoreRow{
			{Service: "a", CpuM: 100, MemoryBytes: 64, Weight: 1, Base: f64(10, 4)},
			{Service: "b", CpuM: AnyRequests, MemoryBytes: AnyRequests, Weight: 1, Base: f64(6, 6)},
		},
	}
}

func TestDecodeRefusesAMalformedTableNamingTheField(t *testing.T) {
	for _, c := range []struct {
		change func(*pb.ScoreTable)
		want   string
	}{
		{func(m *pb.ScoreTable) { m.CpuUsedM = f64(1) }, "cpu_used_m: 2 nodes need 16 bytes of float64, got 8"},
		{func(m *pb.ScoreTable) { m.LoadTerm = nil }, "load_term: missing"},
		{func(m *pb.ScoreTable) { m.LoadTerm.FromFrac = 1 }, "load_term.from_frac: expected 0 <= x < 1, got 1"},
		{func(m *pb.ScoreTable) { m.Nodes[1] = "n1" }, `nodes[1]: duplicate node "n1"`},
		{func(m *pb.ScoreTable) { m.Rows[0].Base = f64(1, math.NaN()) }, "rows[0].base[1]: expected a finite number"},
		{func(m *pb.ScoreTable) { m.Rows[1] = m.Rows[0] }, "rows[1]: duplicate row a/100m/64B"},
	} {
		m := table()
		c.change(m)
		if _, err := Decode(m, time.Now(), nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Decode: got %v, want an error containing %q", err, c.want)
		}
	}
}

func TestAPodGetsItsOwnRowElseItsServicesRowForAnyRequests(t *testing.T) {
	tb, err := Decode(table(), time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := tb.Row(RowKey{"a", 100, 64}); r == nil || r.Key.CPUMilli != 100 {
		t.Errorf("own row: got %v", r)
	}
	if r := tb.Row(RowKey{"a", 200, 64}); r != nil {
		t.Errorf("another shape of a has no row, got %v", r)
	}
	if r := tb.Row(RowKey{"b", 123, 4}); r == nil || r.Key.CPUMilli != AnyRequests {
		t.Errorf("b's row for any requests: got %v", r)
	}
}

func TestTheLoadTermCountsWhatTheSchedulerPlacedSinceTheTable(t *testing.T) {
	tb, _ := Decode(table(), time.Now(), nil)
	r := tb.Row(RowKey{"a", 100, 64})
	// n1: 500 + 100 of 1000 -> 60 %: no penalty; with 300 m placed since -> 90 %: two thirds of the way to 100 %
	if got := tb.RawScore(r, 0, 100, 500); got != 10 {
		t.Errorf("no change since the table: got %v, want 10", got)
	}
	if got := tb.RawScore(r, 0, 100, 800); math.Abs(got-10.0/3) > 1e-12 {
		t.Errorf("300 m since: got %v, want 10/3", got)
	}
	if got := tb.RawScore(r, 0, 100, 200); got != 10 { // fewer than the table counted: nothing subtracted
		t.Errorf("requests went down: got %v, want 10", got)
	}
	if got := tb.Score(r, 0, 100, 800); got != 3 {
		t.Errorf("rounded: got %v, want 3", got)
	}
}

func TestRoundIsTheExtendersHalfUpWithinZeroToTen(t *testing.T) {
	for in, want := range map[float64]int64{-1: 0, 0.49: 0, 0.5: 1, 2.5: 3, 9.7: 10, 12: 10} {
		if got := Round(in); got != want {
			t.Errorf("Round(%v) = %v, want %v", in, got, want)
		}
	}
}

func TestTheAgeGrowsFromTheLastHeartbeat(t *testing.T) {
	t0 := time.Now()
	tb, _ := Decode(table(), t0, nil)
	if a := tb.Age(t0.Add(2 * time.Second)); a != 2*time.Second {
		t.Errorf("age: got %v", a)
	}
	tb.Touch(0.5, t0.Add(3*time.Second))
	if a := tb.Age(t0.Add(4 * time.Second)); a != 1500*time.Millisecond {
		t.Errorf("age after a heartbeat: got %v", a)
	}
	if _, _, o := Lookup(tb, &v1.Pod{}, t0.Add(100*time.Second), 30*time.Second); o != OutcomeStale {
		t.Errorf("an old table: got %q", o)
	}
	if _, _, o := Lookup(nil, &v1.Pod{}, t0, time.Second); o != OutcomeNoTable {
		t.Errorf("no table: got %q", o)
	}
}

func TestServiceOfAndRequestsFollowTheExtendersRules(t *testing.T) {
	yes := true
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-7d9f8c6b5-x2x2x", OwnerReferences: []metav1.OwnerReference{
			{Kind: "ReplicaSet", Name: "web-7d9f8c6b5", Controller: &yes}}},
		Spec: v1.PodSpec{
			Containers: []v1.Container{
				{Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("0.1")}}},
				{Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"),
					v1.ResourceMemory: resource.MustParse("64Mi")}}},
			},
			InitContainers: []v1.Container{{Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
				v1.ResourceCPU: resource.MustParse("1")}}}},
			Overhead: v1.ResourceList{v1.ResourceCPU: resource.MustParse("10m")},
		},
	}
	if k := KeyOf(pod); k != (RowKey{"web", 1010, 64 << 20}) {
		t.Errorf("KeyOf: got %v", k)
	}
	pod.Labels = map[string]string{"app": "shop", "app.kubernetes.io/name": "cart"}
	if s := ServiceOf(pod); s != "cart" {
		t.Errorf("label app.kubernetes.io/name wins over app: got %q", s)
	}
	pod.Annotations = map[string]string{AnnotationService: "checkout"}
	if s := ServiceOf(pod); s != "checkout" {
		t.Errorf("the annotation wins: got %q", s)
	}
}
