{{/*
Plugin mode (scheduler.scoring.mode: plugin; docs/operations.md, "Extender or plugin: when to choose which"): the
second scheduler runs the hrl-kube-scheduler image (kube-scheduler with the HRLScore plugin, scheduler-plugin/) and
scores from the node-score table hrl-extender publishes to the embedding cache (learnedPolicies.cache.mode: its
Deployment and Service hrl-embedding-cache, or the extender's sidecar behind the Service hrl-extender, port
grpc-cache), which streams it to the plugin. No extenders[] entry then: no HTTP call per pod.
*/}}
{{- define "hrl.pluginMode" -}}{{ if eq .Values.scheduler.scoring.mode "plugin" }}true{{ end }}{{- end -}}

{{/* The profile fields that enable HRLScore, at the extender's weight (the same totals as the extender's scores). */}}
{{- define "hrl.pluginProfile" -}}
plugins:
  multiPoint:
    enabled:
      - name: HRLScore
        weight: {{ .Values.scheduler.extender.weight }}   # each score 0..10 x 10 x weight, as an extender's
pluginConfig:
  - name: HRLScore
    args:
      cacheAddress: {{ include "hrl.cacheAddress" (dict "ctx" . "local" false) }}
      maxTableAgeSeconds: {{ .Values.scheduler.scoring.maxTableAgeSeconds }}   # older: neutral scores (fail open)
{{- end -}}
