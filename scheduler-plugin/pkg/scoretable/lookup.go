package scoretable

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// The outcomes of a lookup (label outcome of hrl_plugin_prescore_total): ok, or why every node scores neutral.
const (
	OutcomeOK      = "ok"
	OutcomeNoTable = "neutral_no_table" // no table received yet
	OutcomeStale   = "neutral_stale"    // the table's snapshot is older than the bound
	OutcomeNoRow   = "neutral_no_row"   // the table has no row for the pod's service and requests
)

// Outcomes lists every lookup outcome.
var Outcomes = []string{OutcomeOK, OutcomeNoTable, OutcomeStale, OutcomeNoRow}

// Lookup is what the plugin's PreScore decides for pod with table t (nil: none yet) at now: the row to score with
// and the pod's key, or a nil row and the neutral outcome. A table whose snapshot is older than maxAge is not used.
func Lookup(t *Table, pod *v1.Pod, now time.Time, maxAge time.Duration) (*Row, RowKey, string) {
	k := KeyOf(pod)
	if t == nil {
		return nil, k, OutcomeNoTable
	}
	if t.Age(now) > maxAge {
		return nil, k, OutcomeStale
	}
	r := t.Row(k)
	if r == nil {
		return nil, k, OutcomeNoRow
	}
	return r, k, OutcomeOK
}
