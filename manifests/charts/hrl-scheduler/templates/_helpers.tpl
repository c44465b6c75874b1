{{/*
Shared helpers. Object names are fixed (hrl-extender, hrl-descheduler, hrl-scheduler): kube-scheduler's
urlPrefix, the descheduler's cache address and the docs use them, so one release per cluster.
*/}}

{{/* Labels of every object. Call with (dict "ctx" $ "name" "hrl-extender" "component" "scheduler-extender"). */}}
{{- define "hrl.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: hrl-scheduler
{{- if not .ctx.Values.plainLabels }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version }}
{{- end }}
{{- end -}}

{{/* Labels of a pod template (no version: a chart upgrade alone does not roll the pods). */}}
{{- define "hrl.podLabels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: hrl-scheduler
{{- end -}}

{{/* An image reference from {repository, tag, digest}: repository@digest, else repository:tag (tag "" = default). */}}
{{- define "hrl.image" -}}
{{- $img := .image -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default .default $img.tag) -}}
{{- end -}}
{{- end -}}

{{/* vMAJOR.MINOR.PATCH of the cluster (build metadata such as +k3s1 or -gke.100 dropped): the kube-scheduler tag. */}}
{{- define "hrl.kubeVersion" -}}
{{- regexFind "^v?[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version | trimPrefix "v" | printf "v%s" -}}
{{- end -}}

{{/* The extender's scheme and Service address. */}}
{{- define "hrl.extenderScheme" -}}{{ if .Values.tls.enabled }}https{{ else }}http{{ end }}{{- end -}}
{{- define "hrl.extenderHost" -}}hrl-extender.{{ .Release.Namespace }}.svc{{- end -}}

{{/* Namespaces the descheduler never touches. */}}
{{- define "hrl.excludedNamespaces" -}}
{{- $ns := list "kube-system" .Release.Namespace -}}
{{- range .Values.descheduler.excludedNamespaces }}{{ if not (has . $ns) }}{{ $ns = append $ns . }}{{ end }}{{ end -}}
{{- toJson $ns -}}
{{- end -}}

{{/* Pod securityContext shared by every workload: the Pod Security "restricted" level. */}}
{{- define "hrl.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "hrl.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* The ExtenderConfiguration file (docs/operations.md section 5.1), as a dict. */}}
{{- define "hrl.extenderConfig" -}}
{{- $v := .Values -}}
{{- $listen := dict "host" "0.0.0.0" "port" (int $v.extender.port) -}}
{{- if $v.tls.enabled -}}
{{- $_ := set $listen "tls" (dict "certFile" "/etc/hrl-extender-tls/tls.crt" "keyFile" "/etc/hrl-extender-tls/tls.key") -}}
{{- end -}}
{{- $policy := dict "name" "topology-heuristic" "targetUtilization" 0.7 -}}
{{- if $v.learnedPolicies.enabled -}}
{{- $policy = dict "name" "learned" "bundle" nil -}}
{{- end -}}
{{- $cfg := dict
  "apiVersion" "hrl-scheduler.io/v1alpha1"
  "kind" "ExtenderConfiguration"
  "listen" $listen
  "urlPrefix" $v.extender.urlPrefix
  "kubernetes" (dict "enabled" true)
  "maxSnapshotAgeSeconds" 120
  "policy" $policy
  "topology" (dict "sources" list)
  "logLevel" $v.extender.logLevel -}}
{{- if $v.learnedPolicies.enabled -}}
{{- $_ := set $cfg "cache" (dict "address" (printf "127.0.0.1:%d" (int $v.learnedPolicies.cache.port))) -}}
{{- end -}}
{{- if eq $v.extender.mode "shadow" -}}
{{- $_ := set $cfg "mode" "shadow" -}}
{{- $_ := set $cfg "decisions" (dict "log" "/var/log/hrl-extender/decisions.jsonl") -}}
{{- end -}}
{{- toYaml (mustMergeOverwrite $cfg (deepCopy $v.extender.config)) -}}
{{- end -}}

{{/* The DeschedulerConfiguration file (docs/operations.md section 5.2), as a dict. */}}
{{- define "hrl.deschedulerConfig" -}}
{{- $v := .Values -}}
{{- $d := $v.descheduler -}}
{{- $cfg := dict
  "apiVersion" "hrl-scheduler.io/v1alpha1"
  "kind" "DeschedulerConfiguration"
  "dryRun" $d.dryRun
  "intervalSeconds" (int $d.intervalSeconds)
  "caps" $d.caps
  "excludedNamespaces" (include "hrl.excludedNamespaces" . | fromJsonArray)
  "evictLocalStoragePods" false
  "cooldownSeconds" (int $d.cooldownSeconds)
  "planner" (dict "name" "rebalance-heuristic" "overloadThreshold" 0.85 "localityMargin" 1.0)
  "topology" (dict "sources" list) -}}
{{- $metrics := dict -}}
{{- if eq $d.mode "interval" -}}
{{- $_ := set $cfg "stateFile" nil -}}
{{- $_ := set $metrics "listen" (printf "0.0.0.0:%d" (int $d.metricsPort)) -}}
{{- $_ := set $cfg "leaderElection" (dict "enabled" true "leaseName" "hrl-descheduler" "leaseNamespace" nil "leaseDurationSeconds" 15 "renewDeadlineSeconds" 10 "retryPeriodSeconds" 2) -}}
{{- else -}}
{{- $_ := set $cfg "stateFile" "/var/lib/hrl-descheduler/history.json" -}}
{{- if $v.metrics.pushgateway.url -}}
{{- $_ := set $metrics "pushgateway" $v.metrics.pushgateway.url -}}
{{- $_ := set $metrics "job" "hrl-descheduler" -}}
{{- end -}}
{{- end -}}
{{- $_ := set $cfg "metrics" $metrics -}}
{{- if $v.learnedPolicies.enabled -}}
{{- $_ := set $cfg "planner" (dict "name" "hierarchical" "overloadThreshold" 0.85 "localityMargin" 1.0 "autoscaler" (dict "name" "drpc" "bundle" nil)) -}}
{{- $_ := set $cfg "placement" (dict "name" "learned" "bundle" nil) -}}
{{- $s := $v.learnedPolicies.scaling -}}
{{- $_ := set $cfg "scaling" (dict "enabled" true "minReplicas" (int $s.minReplicas) "maxReplicas" (int $s.maxReplicas) "maxStepPerCycle" (int $s.maxStepPerCycle)) -}}
{{- $_ := set $cfg "cache" (dict "address" (printf "%s:%d" (include "hrl.extenderHost" .) (int $v.learnedPolicies.cache.port))) -}}
{{- end -}}
{{- toYaml (mustMergeOverwrite $cfg (deepCopy $d.config)) -}}
{{- end -}}

{{/* The extenders[] entry of a KubeSchedulerConfiguration; call with (dict "ctx" $ "host" HOST). */}}
{{- define "hrl.extenderRegistration" -}}
{{- $v := .ctx.Values -}}
- urlPrefix: {{ printf "%s://%s:%d%s" (include "hrl.extenderScheme" .ctx) .host (int $v.extender.port) $v.extender.urlPrefix }}
  {{- if $v.scheduler.extender.filter }}
  filterVerb: filter
  {{- end }}
  prioritizeVerb: prioritize
  weight: {{ $v.scheduler.extender.weight }}      # each score 0..10 x weight x 10 is added to the in-tree plugins' total
  nodeCacheCapable: true     # send node names, not whole Node objects
  enableHTTPS: {{ $v.tls.enabled }}
  {{- if $v.tls.enabled }}
  tlsConfig:
    # The CA that signed the extender's certificate; insecure stays false (chain and name are verified).
    caFile: /etc/hrl-scheduler-tls/ca.crt
  {{- end }}
  httpTimeout: {{ $v.scheduler.extender.httpTimeout }}         # a slow extender must not stall scheduling
  ignorable: true            # extender down or failing -> schedule without it (fail open)
{{- end -}}

{{/* Checks of combinations the schema cannot express; each fails the render with one line naming the value. */}}
{{- define "hrl.validate" -}}
{{- range .Values.descheduler.namespaces }}
{{- if or (eq . "kube-system") (eq . $.Release.Namespace) }}
{{- fail (printf "descheduler.namespaces: %q is not allowed (the descheduler never acts in kube-system or in its own namespace %q)" . $.Release.Namespace) }}
{{- end }}
{{- end }}
{{- if and .Values.metrics.pushgateway.url (eq .Values.descheduler.mode "interval") }}
{{- fail "metrics.pushgateway.url: only for descheduler.mode cronjob (interval mode serves /metrics; scrape it)" }}
{{- end }}
{{- end -}}


{{- define "hrl.secondSchedulerConfig" -}}
# KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1) of the second scheduler. clientConnection:
# in-cluster (the Pod's ServiceAccount).
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceLock: leases
  resourceName: hrl-scheduler              # its own Lease: never contends with the default scheduler's
  resourceNamespace: {{ .Release.Namespace }}
profiles:
  - schedulerName: {{ .Values.scheduler.schedulerName }}
# extenders[] is global to a scheduler configuration (every profile calls it): hence a second scheduler.
# Values: DESIGN.md section 5.
extenders:
  {{- include "hrl.extenderRegistration" (dict "ctx" . "host" (include "hrl.extenderHost" .)) | nindent 2 }}
{{- end }}


{{- define "hrl.deschedulerContainer" -}}
{{- $v := .ctx.Values }}
{{- $d := $v.descheduler }}
- name: descheduler
  image: {{ .image }}
  imagePullPolicy: {{ $d.image.pullPolicy }}
  {{- if .interval }}
  args: ["--config", "/etc/hrl-descheduler/config.yaml", "--interval", "{{ $d.intervalSeconds }}", "--json", "--log-format", {{ $v.logFormat | quote }}]
  env:
    - name: POD_NAME
      valueFrom:
        fieldRef: {fieldPath: metadata.name}
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef: {fieldPath: metadata.namespace}
  ports:
    - name: metrics
      containerPort: {{ $d.metricsPort }}
      protocol: TCP
  livenessProbe:
    httpGet: {path: /metrics, port: metrics}
    initialDelaySeconds: 10
    periodSeconds: 20
    timeoutSeconds: 5
  {{- else }}
  args: ["--config", "/etc/hrl-descheduler/config.yaml", "--once", "--json", "--log-format", {{ $v.logFormat | quote }}]
  {{- end }}
  resources:
    {{- toYaml $d.resources | nindent 4 }}
  securityContext:
    {{- include "hrl.containerSecurityContext" . | nindent 4 }}
  volumeMounts:
    - name: config
      mountPath: /etc/hrl-descheduler
      readOnly: true
    {{- if not .interval }}
    - name: state
      mountPath: /var/lib/hrl-descheduler
    {{- end }}
    - name: tmp
      mountPath: /tmp
{{- end }}

{{- define "hrl.deschedulerVolumes" -}}
- name: config
  configMap:
    name: hrl-descheduler-config
{{- if not .interval }}
- name: state
  persistentVolumeClaim:
    claimName: hrl-descheduler-state
{{- end }}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- end }}

{{- define "hrl.deschedulerPodCommon" -}}
{{- $d := .Values.descheduler -}}
serviceAccountName: hrl-descheduler
securityContext:
  {{- include "hrl.podSecurityContext" . | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $d.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $d.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
