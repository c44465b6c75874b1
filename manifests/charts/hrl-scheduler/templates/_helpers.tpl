{{/*
Shared helpers. Object names are fixed per release and cluster-wide objects carry them too (kube-scheduler's
urlPrefix, the descheduler's cache address and the docs use them), so one release per cluster; nameOverride
renames everything (hrl.name).
*/}}

{{/* An object's name: (list $ "extender") -> hrl-extender (NAME-extender with nameOverride); (list $ "product")
-> hrl-scheduler (NAME): the prefix of the shared objects (NAME-metrics, NAME:extender, ...). */}}
{{- define "hrl.name" -}}
{{- $ctx := index . 0 -}}
{{- $what := index . 1 -}}
{{- $o := $ctx.Values.nameOverride -}}
{{- if eq $what "product" -}}
{{- $o | default "hrl-scheduler" -}}
{{- else -}}
{{- printf "%s-%s" ($o | default "hrl") $what -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object. Call with (dict "ctx" $ "name" "hrl-extender" "component" "scheduler-extender"). */}}
{{- define "hrl.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: {{ include "hrl.name" (list .ctx "product") }}
{{- if not .ctx.Values.plainLabels }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version }}
{{- end }}
{{- end -}}

{{/* Labels of a pod template (no version: a chart upgrade alone does not roll the pods), then the component's
podLabels under them (the chart's own win). Call with (dict "ctx" $ "name" NAME "component" C "values" V). */}}
{{- define "hrl.podLabels" -}}
{{- $own := dict "app.kubernetes.io/name" .name "app.kubernetes.io/component" .component "app.kubernetes.io/part-of" (include "hrl.name" (list .ctx "product")) -}}
{{- toYaml (mergeOverwrite (deepCopy (.values.podLabels | default dict)) $own) -}}
{{- end -}}

{{/* The selector of a component's pods. */}}
{{- define "hrl.selector" -}}
app.kubernetes.io/name: {{ .name }}
{{- end -}}

{{/* An image reference from {repository, tag, digest}: repository@digest, else repository:tag (tag "" = default).
Call with (dict "image" V "default" TAG "what" "extender.image"); a missing image fails with its value's name. */}}
{{- define "hrl.image" -}}
{{- $img := .image -}}
{{- if not (kindIs "map" $img) -}}
{{- fail (printf "%s: must be {repository, tag, digest} (got %v)" .what $img) -}}
{{- end -}}
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
{{- define "hrl.extenderHost" -}}{{ include "hrl.name" (list . "extender") }}.{{ .Release.Namespace }}.svc{{- end -}}

{{/* The embedding cache's gRPC address for the extender (the sidecar on 127.0.0.1, else the Service) and for the
descheduler (the extender's Service port with a sidecar, else the cache's own Service). */}}
{{- define "hrl.cacheSidecar" -}}{{ if eq .Values.learnedPolicies.cache.mode "sidecar" }}true{{ end }}{{- end -}}
{{/* The embedding cache runs with the learned policies and in plugin mode (it relays the score table). */}}
{{- define "hrl.cacheEnabled" -}}{{ if or .Values.learnedPolicies.enabled (include "hrl.pluginMode" .) }}true{{ end }}{{- end -}}
{{- define "hrl.cacheAddress" -}}
{{- $c := .ctx.Values.learnedPolicies.cache -}}
{{- if include "hrl.cacheSidecar" .ctx -}}
{{- if .local -}}127.0.0.1:{{ int $c.port }}{{- else -}}{{ include "hrl.extenderHost" .ctx }}:{{ int $c.port }}{{- end -}}
{{- else -}}
{{- include "hrl.name" (list .ctx "embedding-cache") }}.{{ .ctx.Release.Namespace }}.svc:{{ int $c.port }}
{{- end -}}
{{- end -}}

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

{{/* Where a workload runs: priority, node selection, tolerations, affinity (default: prefer one replica per node)
and spread. Call with (dict "values" V "name" NAME). */}}
{{- define "hrl.podPlacement" -}}
{{- $v := .values -}}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
affinity:
{{- if $v.affinity }}
  {{- toYaml $v.affinity | nindent 2 }}
{{- else }}
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "hrl.selector" . | nindent 14 }}
{{- end }}
{{- with $v.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The pod template's annotations: the config checksum, then podAnnotations. */}}
{{- define "hrl.podAnnotations" -}}
{{- with .checksum }}
checksum/config: {{ . }}
{{- end }}
{{- with .values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The bundles volume (learnedPolicies.bundles.volume) at /etc/hrl-bundles: the volume and the mount. */}}
{{- define "hrl.bundlesVolume" -}}
{{- with .Values.learnedPolicies.bundles.volume }}
- name: bundles
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
{{- define "hrl.bundlesMount" -}}
{{- if .Values.learnedPolicies.bundles.volume }}
- name: bundles
  mountPath: /etc/hrl-bundles
  readOnly: true
{{- end }}
{{- end -}}
{{/* A bundle's path in the configuration: /etc/hrl-bundles/DIR, or nil (the image's). Call with (list $ "placement"). */}}
{{- define "hrl.bundlePath" -}}
{{- $b := (index . 0).Values.learnedPolicies.bundles -}}
{{- $dir := index $b (index . 1) -}}
{{- if and $b.volume $dir -}}{{ printf "/etc/hrl-bundles/%s" $dir }}{{- end -}}
{{- end -}}

{{/* The ExtenderConfiguration file (docs/operations.md section 5.1), as a dict. */}}
{{- define "hrl.extenderConfig" -}}
{{- $v := .Values -}}
{{- $listen := dict "host" "0.0.0.0" "port" (int $v.extender.port) -}}
{{- with $v.extender.healthPort -}}
{{- $_ := set $listen "healthPort" (int .) -}}
{{- end -}}
{{- if $v.tls.enabled -}}
{{- $_ := set $listen "tls" (dict "certFile" "/etc/hrl-extender-tls/tls.crt" "keyFile" "/etc/hrl-extender-tls/tls.key") -}}
{{- end -}}
{{- $policy := dict "name" "topology-heuristic" "targetUtilization" 0.7 -}}
{{- if $v.learnedPolicies.enabled -}}
{{- $policy = dict "name" "learned" "bundle" (include "hrl.bundlePath" (list . "placement") | default nil) -}}
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
{{- $_ := set $cfg "cache" (dict "address" (include "hrl.cacheAddress" (dict "ctx" . "local" true))) -}}
{{- end -}}
{{- $ru := $v.metricsSources.resourceUsage -}}
{{- if $ru.uri -}}
{{- $_ := set $cfg "metricsSources" (dict "resourceUsage" (dict "uri" $ru.uri "refreshSeconds" $ru.refreshSeconds "maxAgeSeconds" $ru.maxAgeSeconds)) -}}
{{- end -}}
{{- if include "hrl.pluginMode" . -}}
{{- $_ := set $cfg "scoreTable" (dict "publish" true "address" (include "hrl.cacheAddress" (dict "ctx" . "local" true))) -}}
{{- $_ := set $cfg "precompute" (dict "enabled" false) -}}
{{- end -}}
{{- if eq $v.extender.mode "shadow" -}}
{{- if include "hrl.pluginMode" . -}}
{{- fail "extender.mode: shadow with scheduler.scoring.mode: plugin: the HRLScore plugin would score with the policy while shadow mode answers neutral scores; use the extender mode for shadow" -}}
{{- end -}}
{{- $_ := set $cfg "mode" "shadow" -}}
{{- $_ := set $cfg "decisions" (dict "log" "/var/log/hrl-extender/decisions.jsonl") -}}
{{- end -}}
{{- toYaml (mustMergeOverwrite $cfg (deepCopy ($v.extender.config | default dict))) -}}
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
{{- $_ := set $cfg "leaderElection" (dict "enabled" true "leaseName" (include "hrl.name" (list . "descheduler")) "leaseNamespace" nil "leaseDurationSeconds" 15 "renewDeadlineSeconds" 10 "retryPeriodSeconds" 2) -}}
{{- else -}}
{{- $_ := set $cfg "stateFile" "/var/lib/hrl-descheduler/history.json" -}}
{{- if $v.metrics.pushgateway.url -}}
{{- $_ := set $metrics "pushgateway" $v.metrics.pushgateway.url -}}
{{- $_ := set $metrics "job" (include "hrl.name" (list . "descheduler")) -}}
{{- $_ := set $metrics "groupingKey" (dict "namespace" .Release.Namespace) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $cfg "metrics" $metrics -}}
{{- if $v.learnedPolicies.enabled -}}
{{- /* as the simulator's learned stacks run (policy.sim.hrl_stacks: hrl_planner, MOVE_MARGIN): the learned high level's
capacity targets carried out by the intent autoscaler (its own tolerance and scale-down stabilisation), moves at
a margin of 2 score points at most every 5 minutes (whatever the descheduler's cycle), the application's SLO */ -}}
{{- $intentPolicy := dict "name" "learned" "bundle" (include "hrl.bundlePath" (list . "highLevel") | default nil) "sloP95Ms" $v.learnedPolicies.sloP95Ms -}}
{{- $auto := dict "name" "intent" -}}
{{- $_ := set $cfg "planner" (dict "name" "hierarchical" "overloadThreshold" 0.85 "localityMargin" 2.0 "movesPeriodSeconds" 300 "autoscaler" $auto "intentPolicy" $intentPolicy) -}}
{{- $_ := set $cfg "placement" (dict "name" "learned" "bundle" (include "hrl.bundlePath" (list . "placement") | default nil)) -}}
{{- $s := $v.learnedPolicies.scaling -}}
{{- $_ := set $cfg "scaling" (dict "enabled" true "minReplicas" (int $s.minReplicas) "maxReplicas" (int $s.maxReplicas) "maxStepPerCycle" (int $s.maxStepPerCycle)) -}}
{{- $cache := dict "address" (include "hrl.cacheAddress" (dict "ctx" . "local" false)) -}}
{{- with include "hrl.bundlePath" (list . "encoder") }}{{ $_ := set $cache "encoderBundle" . }}{{ end -}}
{{- $_ := set $cfg "cache" $cache -}}
{{- end -}}
{{- $ms := dict -}}
{{- $ru := $v.metricsSources.resourceUsage -}}
{{- if $ru.uri -}}
{{- $_ := set $ms "resourceUsage" (dict "uri" $ru.uri "maxAgeSeconds" $ru.maxAgeSeconds) -}}
{{- end -}}
{{- $ss := $v.metricsSources.serviceSignals -}}
{{- if $ss.uri -}}
{{- $_ := set $ms "serviceSignals" (dict "uri" $ss.uri "maxAgeSeconds" $ss.maxAgeSeconds) -}}
{{- end -}}
{{- if $ms -}}
{{- $_ := set $cfg "metricsSources" $ms -}}
{{- end -}}
{{- toYaml (mustMergeOverwrite $cfg (deepCopy ($d.config | default dict))) -}}
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

{{/* Checks of combinations the schema cannot express; each fails the render with one line naming the value. The
configuration files' own cross-field checks are hrl.validateConfigs (templates/_validate.tpl, generated). */}}
{{- define "hrl.validate" -}}
{{- range .Values.descheduler.namespaces }}
{{- if or (eq . "kube-system") (eq . $.Release.Namespace) }}
{{- fail (printf "descheduler.namespaces: %q is not allowed (the descheduler never acts in kube-system or in its own namespace %q)" . $.Release.Namespace) }}
{{- end }}
{{- end }}
{{- if and (include "hrl.pluginMode" .) (ne .Values.scheduler.mode "second") }}
{{- fail (printf "scheduler.scoring.mode: plugin needs scheduler.mode second (got %q: the cluster's own kube-scheduler has no HRLScore plugin)" .Values.scheduler.mode) }}
{{- end }}
{{- if and .Values.metrics.pushgateway.url (eq .Values.descheduler.mode "interval") }}
{{- fail "metrics.pushgateway.url: only for descheduler.mode cronjob (interval mode serves /metrics; scrape it)" }}
{{- end }}
{{- $s := .Values.learnedPolicies.scaling }}
{{- if gt (int $s.minReplicas) (int $s.maxReplicas) }}
{{- fail (printf "learnedPolicies.scaling.minReplicas: %d is above maxReplicas %d" (int $s.minReplicas) (int $s.maxReplicas)) }}
{{- end }}
{{- with .Values.extender.healthPort }}
{{- if eq (int .) (int $.Values.extender.port) }}
{{- fail (printf "extender.healthPort: must differ from extender.port (%d): the probes' listener binds a port of its own" (int .)) }}
{{- end }}
{{- $c := $.Values.learnedPolicies.cache }}
{{- if and (include "hrl.cacheEnabled" $) (include "hrl.cacheSidecar" $) (has (int .) (list (int $c.port) (int $c.metricsPort))) }}
{{- fail (printf "extender.healthPort: %d is a port of the embedding cache sidecar (learnedPolicies.cache.port or metricsPort), which shares the Pod's ports" (int .)) }}
{{- end }}
{{- end }}
{{- $b := .Values.learnedPolicies.bundles }}
{{- if and (not $b.volume) (or $b.placement $b.highLevel $b.encoder) }}
{{- fail "learnedPolicies.bundles: placement, highLevel and encoder name directories of learnedPolicies.bundles.volume, which is not set" }}
{{- end }}
{{- /* extraVolumes must not reuse a volume name of the chart's in the same Pod (the cache sidecar shares the
extender's Pod, so it takes the extender's names too) */}}
{{- $ext := list "config" "tmp" "decisions" "tls" "bundles" }}
{{- range $key, $names := dict "extender" $ext "descheduler" (list "config" "state" "tmp" "bundles") "scheduler" (list "config" "extender-ca") "learnedPolicies.cache" $ext }}
{{- $vals := ternary $.Values.learnedPolicies.cache (get $.Values $key) (eq $key "learnedPolicies.cache") }}
{{- range $i, $vol := $vals.extraVolumes }}
{{- if has $vol.name $names }}
{{- fail (printf "%s.extraVolumes[%d]: the name %q is a volume of the chart's (%s); choose another name" $key $i $vol.name (join ", " $names)) }}
{{- end }}
{{- end }}
{{- end }}
{{- include "hrl.validateConfigs" . }}
{{- end -}}


{{- define "hrl.secondSchedulerConfig" -}}
# KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1) of the second scheduler. clientConnection:
# in-cluster (the Pod's ServiceAccount).
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceLock: leases
  resourceName: {{ include "hrl.name" (list . "scheduler") }}              # its own Lease: never contends with the default scheduler's
  resourceNamespace: {{ .Release.Namespace }}
profiles:
  - schedulerName: {{ .Values.scheduler.schedulerName }}
    {{- if include "hrl.pluginMode" . }}
    {{- include "hrl.pluginProfile" . | nindent 4 }}
    {{- end }}
{{- if not (include "hrl.pluginMode" .) }}
# extenders[] is global to a scheduler configuration (every profile calls it): hence a second scheduler.
# Values: DESIGN.md section 5.
extenders:
  {{- include "hrl.extenderRegistration" (dict "ctx" . "host" (include "hrl.extenderHost" .)) | nindent 2 }}
{{- end }}
{{- end }}


{{- define "hrl.deschedulerContainer" -}}
{{- $v := .ctx.Values }}
{{- $d := $v.descheduler }}
- name: descheduler
  image: {{ .image }}
  imagePullPolicy: {{ $d.image.pullPolicy }}
  {{- if .interval }}
  args: ["--config", "/etc/hrl-descheduler/config.yaml", "--interval", "{{ $d.intervalSeconds }}", "--json", "--log-format", {{ $v.logFormat | quote }}]
  {{- else }}
  args: ["--config", "/etc/hrl-descheduler/config.yaml", "--once", "--json", "--log-format", {{ $v.logFormat | quote }}]
  {{- end }}
  {{- if or .interval $d.extraEnv }}
  env:
    {{- if .interval }}
    - name: POD_NAME
      valueFrom:
        fieldRef: {fieldPath: metadata.name}
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef: {fieldPath: metadata.namespace}
    {{- end }}
    {{- with $d.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- end }}
  {{- if .interval }}
  ports:
    - name: metrics
      containerPort: {{ $d.metricsPort }}
      protocol: TCP
  livenessProbe:
    httpGet: {path: /metrics, port: metrics}
    initialDelaySeconds: 10
    periodSeconds: 20
    timeoutSeconds: 5
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
    {{- include "hrl.bundlesMount" .ctx | nindent 4 }}
    {{- with $d.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{- define "hrl.deschedulerVolumes" -}}
- name: config
  configMap:
    name: {{ include "hrl.name" (list .ctx "descheduler") }}-config
{{- if not .interval }}
- name: state
  persistentVolumeClaim:
    claimName: {{ include "hrl.name" (list .ctx "descheduler") }}-state
{{- end }}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- include "hrl.bundlesVolume" .ctx }}
{{- with .ctx.Values.descheduler.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "hrl.deschedulerPodCommon" -}}
{{- $d := .Values.descheduler -}}
serviceAccountName: {{ include "hrl.name" (list . "descheduler") }}
securityContext:
  {{- include "hrl.podSecurityContext" . | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- include "hrl.podPlacement" (dict "values" $d "name" (include "hrl.name" (list . "descheduler"))) }}
{{- end }}

{{/* The embedding cache's probes: grpc.health.v1 answers SERVING for "" as soon as it listens (well under a
second), and NOT_SERVING on SIGTERM while it drains. Call with learnedPolicies.cache. */}}
{{- define "hrl.cacheProbes" -}}
readinessProbe:
  grpc: {port: {{ .port }}}
  periodSeconds: 5
  timeoutSeconds: 2
  failureThreshold: 2
livenessProbe:
  grpc: {port: {{ .port }}}
  initialDelaySeconds: 5
  periodSeconds: 10
  timeoutSeconds: 2
  failureThreshold: 3
{{- end -}}
