{{/* Name of the chart (or nameOverride). */}}
{{- define "gfd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Prefix of every object's name: fullnameOverride, else the release name when it
already contains the chart name, else "<release>-<name>". Release "gfd" gives the
names of deploy/ (gfd, gfd-node-labeler, ...).
*/}}
{{- define "gfd.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "gfd.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gfd.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{/* The ServiceAccount's user name, as the admission policies match it. */}}
{{- define "gfd.serviceAccountUser" -}}
{{- printf "system:serviceaccount:%s:%s" (include "gfd.namespace" .) (include "gfd.fullname" .) -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "gfd.labels" -}}
app.kubernetes.io/name: {{ include "gfd.name" . }}
app.kubernetes.io/part-of: gfd
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* The DaemonSet's selector (immutable: never add to it). */}}
{{- define "gfd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gfd.name" . }}
app.kubernetes.io/component: agent
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Whether gfd talks to the API server (a token is mounted only then). */}}
{{- define "gfd.usesApi" -}}
{{- if or .Values.sinks.node.enabled .Values.sinks.nodeFeature.enabled -}}true{{- end -}}
{{- end -}}

{{/*
Whether gfd writes its GPUHealthy condition and events: with the node sink, unless
health.condition is false (null: gfd's default, on).
*/}}
{{- define "gfd.healthCondition" -}}
{{- if and .Values.sinks.node.enabled (ne (toString .Values.health.condition) "false") -}}true{{- end -}}
{{- end -}}

{{/* Whether the pod runs as uid 0: the feature file and vGPU detection need it. */}}
{{- define "gfd.runsAsRoot" -}}
{{- if or .Values.sinks.featureFile.enabled .Values.vgpu.enabled .Values.health.kernelLog.enabled -}}true{{- end -}}
{{- end -}}

{{/* Name of the ConfigMap holding gfd's config files, or "" when there is none. */}}
{{- define "gfd.configMapName" -}}
{{- if and .Values.config.name (gt (len .Values.config.map) 0) -}}
{{- fail "config: set config.name (an existing ConfigMap) or config.map (one the chart creates), not both" -}}
{{- end -}}
{{- if .Values.config.name -}}
{{- .Values.config.name -}}
{{- else if gt (len .Values.config.map) 0 -}}
{{- printf "%s-config" (include "gfd.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/*
The key of the config file gfd reads: config.default, else the first fallback
strategy that applies, as the reference's config-manager picks one: "named" (a key
named "default"), "single" (the only key of config.map), "empty" (no config file).
*/}}
{{- define "gfd.configKey" -}}
{{- $map := include "gfd.configMapName" . -}}
{{- if $map -}}
{{- if .Values.config.default -}}
{{- if and (gt (len .Values.config.map) 0) (not (hasKey .Values.config.map .Values.config.default)) -}}
{{- fail (printf "config.default: %q is not a key of config.map (%s)" .Values.config.default (keys .Values.config.map | sortAlpha | join ", ")) -}}
{{- end -}}
{{- .Values.config.default -}}
{{- else -}}
{{- $chosen := "" -}}
{{- $done := false -}}
{{- range .Values.config.fallbackStrategies -}}
{{- if not $done -}}
{{- if eq . "named" -}}
{{- if or $.Values.config.name (hasKey $.Values.config.map "default") -}}
{{- $chosen = "default" -}}{{- $done = true -}}
{{- end -}}
{{- else if eq . "single" -}}
{{- if eq (len $.Values.config.map) 1 -}}
{{- $chosen = keys $.Values.config.map | first -}}{{- $done = true -}}
{{- end -}}
{{- else if eq . "empty" -}}
{{- $done = true -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not $done -}}
{{- fail "config.default: empty, and no config.fallbackStrategies entry chose a config file; set config.default to a key of the ConfigMap" -}}
{{- end -}}
{{- $chosen -}}
{{- end -}}
{{- end -}}
{{- end -}}
