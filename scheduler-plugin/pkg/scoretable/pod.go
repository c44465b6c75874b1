package scoretable

import (
	"regexp"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// AnnotationService names a pod's call-graph service explicitly (policy.observe.ANNOTATION_SERVICE).
const AnnotationService = "hrl-scheduler.io/service"

// rsHash is a ReplicaSet name's pod-template-hash suffix (policy/observe.py _RS_HASH).
var rsHash = regexp.MustCompile(`^(.+)-[0-9a-z]{5,10}$`)

// ServiceOf is the call-graph service of pod, by the extender's rule (policy.observe.service_of), first match wins:
// the annotation hrl-scheduler.io/service; the label app.kubernetes.io/name, then app; the controlling owner's name
// (a ReplicaSet's without its hash suffix); the pod name without its last two dash-separated parts.
func ServiceOf(pod *v1.Pod) string {
	if s := pod.Annotations[AnnotationService]; s != "" {
		return s
	}
	for _, k := range [...]string{"app.kubernetes.io/name", "app"} {
		if s := pod.Labels[k]; s != "" {
			return s
		}
	}
	for _, o := range pod.OwnerReferences {
		if o.Controller == nil || !*o.Controller {
			continue
		}
		if o.Kind == "ReplicaSet" {
			if m := rsHash.FindStringSubmatch(o.Name); m != nil {
				return m[1]
			}
		}
		return o.Name
	}
	parts := strings.Split(pod.Name, "-")
	if len(parts) > 2 {
		return strings.Join(parts[:len(parts)-2], "-")
	}
	return pod.Name
}

// Requests is the pod's effective CPU (millicores) and memory (bytes) requests by the extender's rule
// (policy/observe.py _pod_spec_resources): each container's request, or its limit where the request is unset, rounded
// up and summed; the larger of that and each init container's request; plus spec.overhead.
func Requests(pod *v1.Pod) (cpuMilli, memoryBytes int64) {
	for i := range pod.Spec.Containers {
		r := &pod.Spec.Containers[i].Resources
		cpuMilli += effective(r, v1.ResourceCPU, true)
		memoryBytes += effective(r, v1.ResourceMemory, false)
	}
	for i := range pod.Spec.InitContainers {
		r := pod.Spec.InitContainers[i].Resources.Requests
		if q, ok := r[v1.ResourceCPU]; ok && q.MilliValue() > cpuMilli {
			cpuMilli = q.MilliValue()
		}
		if q, ok := r[v1.ResourceMemory]; ok && q.Value() > memoryBytes {
			memoryBytes = q.Value()
		}
	}
	if q, ok := pod.Spec.Overhead[v1.ResourceCPU]; ok {
		cpuMilli += q.MilliValue()
	}
	if q, ok := pod.Spec.Overhead[v1.ResourceMemory]; ok {
		memoryBytes += q.Value()
	}
	return cpuMilli, memoryBytes
}

func effective(r *v1.ResourceRequirements, name v1.ResourceName, milli bool) int64 {
	q, ok := r.Requests[name]
	if !ok {
		if q, ok = r.Limits[name]; !ok {
			return 0
		}
	}
	if milli {
		return q.MilliValue()
	}
	return q.Value()
}

// KeyOf is the table row key of pod.
func KeyOf(pod *v1.Pod) RowKey {
	cpu, mem := Requests(pod)
	return RowKey{Service: ServiceOf(pod), CPUMilli: cpu, MemoryBytes: mem}
}
