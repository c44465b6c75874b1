// Command hrl-score-check answers, for a score table and a list of pods, what the HRLScore plugin scores each
// candidate node: the same lookup (scoretable.Lookup, the plugin's PreScore) and the same arithmetic
// (Table.Score, its Score) the plugin runs inside kube-scheduler. The parity test (tests/unit/test_plugin_parity.py)
// feeds it the extender's own cluster states and compares with the extender's replies.
//
// stdin, one JSON object:
//
//	{"table": "PATH",                       a serialized hrlscheduler.embeddings.v1.ScoreTable (binary protobuf)
//	 "waitSeconds": 0,                      time since the table arrived (its age grows by this much)
//	 "maxTableAgeSeconds": 30,
//	 "cases": [{"pod": {...},               a core/v1 Pod as JSON
//	            "nodes": ["n1", ...],       the feasible nodes
//	            "requestedMilliCPU": {"n1": 1200}}]}  the scheduler's requested CPU per node (absent: the table's)
//
// stdout: {"cases": [{"outcome": "ok" | "neutral_...", "key": "svc/100m/134217728B", "scores": [0..10, ...],
// "raw": [float, ...]}]}, scores in "nodes" order (all 0 unless ok). Exit 2 with one line on stderr for bad input.
package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"time"

	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"

	pb "github.com/hrl-scheduler/hrl-scheduler/scheduler-plugin/pkg/proto/embeddingsv1"
	"github.com/hrl-scheduler/hrl-scheduler/scheduler-plugin/pkg/scoretable"
)

type input struct {
	Table              string   `json:"table"`
	WaitSeconds        float64  `json:"waitSeconds"`
	MaxTableAgeSeconds *float64 `json:"maxTableAgeSeconds"`
	Cases              []struct {
		Pod               v1.Pod           `json:"pod"`
		Nodes             []string         `json:"nodes"`
		RequestedMilliCPU map[string]int64 `json:"requestedMilliCPU"`
	} `json:"cases"`
}

type result struct {
	Outcome string    `json:"outcome"`
	Key     string    `json:"key"`
	Scores  []int64   `json:"scores"`
	Raw     []float64 `json:"raw"`
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "hrl-score-check: "+format+"\n", a...)
	os.Exit(2)
}

func main() {
	var in input
	dec := json.NewDecoder(os.Stdin)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		fail("stdin: %v", err)
	}
	var table *scoretable.Table
	received := time.Now()
	if in.Table != "" {
		b, err := os.ReadFile(in.Table)
		if err != nil {
			fail("table: %v", err)
		}
		var m pb.ScoreTable
		if err := proto.Unmarshal(b, &m); err != nil {
			fail("table %s: %v", in.Table, err)
		}
		if table, err = scoretable.Decode(&m, received, nil); err != nil {
			fail("table %s: %v", in.Table, err)
		}
	}
	maxAge := 30.0
	if in.MaxTableAgeSeconds != nil {
		maxAge = *in.MaxTableAgeSeconds
	}
	now := received.Add(time.Duration(in.WaitSeconds * float64(time.Second)))
	out := struct {
		Cases []result `json:"cases"`
	}{Cases: []result{}}
	for _, c := range in.Cases {
		row, key, outcome := scoretable.Lookup(table, &c.Pod, now, time.Duration(maxAge*float64(time.Second)))
		r := result{Outcome: outcome, Key: key.String(), Scores: make([]int64, len(c.Nodes)),
			Raw: make([]float64, len(c.Nodes))}
		if row != nil {
			for i, n := range c.Nodes {
				pos, ok := table.Position(n)
				if !ok {
					continue
				}
				req, given := c.RequestedMilliCPU[n]
				if !given {
					req = int64(math.Round(table.RequestedMilliCPU(pos)))
				}
				r.Raw[i] = table.RawScore(row, pos, key.CPUMilli, req)
				r.Scores[i] = table.Score(row, pos, key.CPUMilli, req)
			}
		}
		out.Cases = append(out.Cases, r)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail("stdout: %v", err)
	}
}
