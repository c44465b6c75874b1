// Package scoretable holds the node-score table the hrl-scheduler extender computes (policy/lowlevel/scoretable.py)
// and the arithmetic that turns one of its rows into a node's score for a pod: the per-pod load term, applied with
// the scheduler's own, newer view of the node's requested CPU, then the extender's rounding. It keeps no policy of
// its own: every number that depends on the call graph, the intent or a learned network comes from the table.
//
// The formula (policy/cache/proto/embeddings.proto, message ScoreTable; policy.lowlevel.apply_load_term is the
// Python reference, bit for bit):
//
//	since_m(n) = max(0, requested CPU of n as the scheduler sees it - requested_cpu_m[n])
//	frac(n)    = (cpu_used_m[n] + since_m(n) + pod_cpu_m) / max(alloc_cpu_m[n], 1)  (float32-rounded if frac_float32)
//	over(n)    = clip((frac(n) - from_frac) / (1 - from_frac), 0, 1)
//	score(n)   = scale * clip(row.base[n] * (1 - row.weight * over(n)), 0, cap)
//
// and the reply kube-scheduler would have had from the extender: floor(clip(score, 0, 10) + 0.5), an integer in
// 0..10 (k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority). A pod's row is the one of its service and
// requests, else its service's row for any requests (AnyRequests).
package scoretable

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	pb "github.com/hrl-scheduler/hrl-scheduler/scheduler-plugin/pkg/proto/embeddingsv1"
)

// MaxExtenderPriority is the top of the extender's score range (k8s.io/kube-scheduler/extender/v1).
const MaxExtenderPriority = 10

// AnyRequests in both requests of a RowKey: the row of every pod of the service (its base reads no requests).
const AnyRequests = -1

// RowKey is what a row's scores depend on of a pod: its service and its effective requests.
type RowKey struct {
	Service     string
	CPUMilli    int64
	MemoryBytes int64
}

func (k RowKey) String() string {
	return fmt.Sprintf("%s/%dm/%dB", k.Service, k.CPUMilli, k.MemoryBytes)
}

// Row is one (service, requests) row: the base of every node's score and the load term's weight.
type Row struct {
	Key    RowKey
	Weight float64
	Base   []float64 // one per node, Table.Nodes order
}

// LoadTerm is how the per-pod load term is applied (message LoadTerm).
type LoadTerm struct {
	Scale, FromFrac, Cap float64
	FracFloat32          bool
}

// freshness is what the table's age is computed from: the snapshot's age when the message left the cache, and
// when it arrived here (a monotonic reading), so that the two machines' clocks never need to agree.
type freshness struct {
	ageAtReceiptS float64
	received      time.Time
}

// Table is one decoded ScoreTable: immutable once built, except for its freshness (Touch).
type Table struct {
	Generation  uint64
	Version     uint64
	Producer    string
	Policy      string
	ComputedAtS float64
	Nodes       []string

	pos       map[string]int32
	alloc     []float64
	used      []float64
	requested []float64
	term      LoadTerm
	rows      map[RowKey]*Row
	fresh     atomic.Pointer[freshness]
}

// Decode checks and converts a ScoreTable message. prev (may be nil) is the table it replaces: its node index is
// reused when the node list is the same. Errors name the field and the value.
func Decode(m *pb.ScoreTable, received time.Time, prev *Table) (*Table, error) {
	n := len(m.GetNodes())
	t := &Table{
		Generation:  m.GetGeneration(),
		Version:     m.GetVersion(),
		Producer:    m.GetProducer(),
		Policy:      m.GetPolicy(),
		ComputedAtS: m.GetComputedAtS(),
		Nodes:       m.GetNodes(),
	}
	var err error
	if t.alloc, err = floats("alloc_cpu_m", m.GetAllocCpuM(), n); err != nil {
		return nil, err
	}
	if t.used, err = floats("cpu_used_m", m.GetCpuUsedM(), n); err != nil {
		return nil, err
	}
	if t.requested, err = floats("requested_cpu_m", m.GetRequestedCpuM(), n); err != nil {
		return nil, err
	}
	lt := m.GetLoadTerm()
	if lt == nil {
		return nil, fmt.Errorf("load_term: missing")
	}
	t.term = LoadTerm{Scale: lt.GetScale(), FromFrac: lt.GetFromFrac(), Cap: lt.GetCap(), FracFloat32: lt.GetFracFloat32()}
	if !(t.term.FromFrac >= 0 && t.term.FromFrac < 1) {
		return nil, fmt.Errorf("load_term.from_frac: expected 0 <= x < 1, got %v", t.term.FromFrac)
	}
	if !finite(t.term.Scale) || !finite(t.term.Cap) {
		return nil, fmt.Errorf("load_term: scale and cap must be finite, got %v and %v", t.term.Scale, t.term.Cap)
	}
	if prev != nil && sameNames(prev.Nodes, t.Nodes) {
		t.pos = prev.pos
	} else {
		t.pos = make(map[string]int32, n)
		for i, name := range t.Nodes {
			if _, dup := t.pos[name]; dup {
				return nil, fmt.Errorf("nodes[%d]: duplicate node %q", i, name)
			}
			t.pos[name] = int32(i)
		}
	}
	t.rows = make(map[RowKey]*Row, len(m.GetRows()))
	for i, r := range m.GetRows() {
		k := RowKey{Service: r.GetService(), CPUMilli: r.GetCpuM(), MemoryBytes: r.GetMemoryBytes()}
		base, err := floats(fmt.Sprintf("rows[%d].base", i), r.GetBase(), n)
		if err != nil {
			return nil, err
		}
		if !finite(r.GetWeight()) {
			return nil, fmt.Errorf("rows[%d].weight: expected a finite number, got %v", i, r.GetWeight())
		}
		for j, v := range base {
			if !finite(v) {
				return nil, fmt.Errorf("rows[%d].base[%d]: expected a finite number, got %v", i, j, v)
			}
		}
		if _, dup := t.rows[k]; dup {
			return nil, fmt.Errorf("rows[%d]: duplicate row %s", i, k)
		}
		t.rows[k] = &Row{Key: k, Weight: r.GetWeight(), Base: base}
	}
	t.Touch(m.GetSnapshotAgeS(), received)
	return t, nil
}

func floats(field string, b []byte, n int) ([]float64, error) {
	if len(b) != 8*n {
		return nil, fmt.Errorf("%s: %d nodes need %d bytes of float64, got %d", field, n, 8*n, len(b))
	}
	out := make([]float64, n)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return out, nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func sameNames(a, b []string) bool {
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

// Touch records a heartbeat: the snapshot was ageS seconds old when the message left the cache at time now.
func (t *Table) Touch(ageS float64, now time.Time) {
	if !(ageS >= 0) {
		ageS = 0
	}
	t.fresh.Store(&freshness{ageAtReceiptS: ageS, received: now})
}

// Age is the age of the table's snapshot at now: its age on receipt plus the time since.
func (t *Table) Age(now time.Time) time.Duration {
	f := t.fresh.Load()
	return time.Duration(f.ageAtReceiptS*float64(time.Second)) + now.Sub(f.received)
}

// Row is the row a pod of key k is scored with: k's own, else its service's for any requests; nil when neither.
func (t *Table) Row(k RowKey) *Row {
	if r := t.rows[k]; r != nil {
		return r
	}
	return t.rows[RowKey{Service: k.Service, CPUMilli: AnyRequests, MemoryBytes: AnyRequests}]
}

// Rows is the number of rows.
func (t *Table) Rows() int { return len(t.rows) }

// Position is the index of node name in Nodes.
func (t *Table) Position(name string) (int, bool) {
	p, ok := t.pos[name]
	return int(p), ok
}

// RawScore is score(n) of the package comment for row r at node position pos, for a pod requesting podCPUMilli, with
// the scheduler's requested CPU of the node (millicores). Every product is rounded on its own (the explicit
// conversions forbid fused multiply-adds), so the result is the Python reference's bit for bit.
func (t *Table) RawScore(r *Row, pos int, podCPUMilli, requestedMilli int64) float64 {
	since := float64(requestedMilli) - t.requested[pos]
	if !(since > 0) {
		since = 0
	}
	alloc := t.alloc[pos]
	if !(alloc >= 1) {
		alloc = 1
	}
	frac := (float64(t.used[pos]+since) + float64(podCPUMilli)) / alloc
	if t.term.FracFloat32 {
		frac = float64(float32(frac))
	}
	over := (frac - t.term.FromFrac) / (1 - t.term.FromFrac)
	over = clip(over, 0, 1)
	v := float64(r.Base[pos] * (1 - float64(r.Weight*over)))
	v = clip(v, 0, t.term.Cap)
	return float64(t.term.Scale * v)
}

// Score is the extender's reply for the node: RawScore clipped to 0..10 and rounded half up.
func (t *Table) Score(r *Row, pos int, podCPUMilli, requestedMilli int64) int64 {
	return Round(t.RawScore(r, pos, podCPUMilli, requestedMilli))
}

// Round is the extender's rounding of a finite score: clip to 0..MaxExtenderPriority, then half up.
func Round(v float64) int64 {
	return int64(math.Floor(clip(v, 0, MaxExtenderPriority) + 0.5))
}

func clip(v, lo, hi float64) float64 {
	if v < lo {
		return lo
	}
	if v > hi {
		return hi
	}
	return v
}

// RequestedMilliCPU is the table's requested CPU of the node at pos (as kube-scheduler counts it), millicores.
func (t *Table) RequestedMilliCPU(pos int) float64 { return t.requested[pos] }
