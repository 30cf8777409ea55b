{{/* The chart's name. */}}
{{- define "spots-booster.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Object names: the release's, unless it lacks the chart's name. */}}
{{- define "spots-booster.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "spots-booster.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "spots-booster.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* The selector: the one label the kustomize base selects by. */}}
{{- define "spots-booster.selectorLabels" -}}
app.kubernetes.io/name: {{ include "spots-booster.name" . }}
{{- end }}

{{/* Labels on every object: the selector's and Helm's bookkeeping. */}}
{{- define "spots-booster.labels" -}}
{{ include "spots-booster.selectorLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "spots-booster.serviceAccountName" -}}
{{- default (include "spots-booster.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{/* A flag's value as the binary reads it (lists comma-separated), or its default when unset. */}}
{{- define "spots-booster.flag" -}}
{{- $value := index .config .key -}}
{{- if kindIs "invalid" $value -}}{{ .default }}{{- else if kindIs "slice" $value -}}{{ join "," $value }}{{- else -}}{{ $value }}{{- end -}}
{{- end }}

{{/* The RoleBindings' and ClusterRoleBinding's subject. */}}
{{- define "spots-booster.subject" -}}
- kind: ServiceAccount
  name: {{ include "spots-booster.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end }}
