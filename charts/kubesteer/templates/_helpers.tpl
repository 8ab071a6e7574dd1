{{/* The name shared by the chart's objects. */}}
{{- define "kubesteer.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Standard labels. */}}
{{- define "kubesteer.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Where the apiserver sends reviews: the URL, or the in-cluster Service. */}}
{{- define "kubesteer.clientConfig" -}}
{{- $root := index . 0 -}}
{{- $path := index . 1 -}}
{{- if $root.Values.webhook.url }}
url: {{ printf "%s%s" (trimSuffix "/" $root.Values.webhook.url) $path | quote }}
{{- else }}
service:
  name: {{ include "kubesteer.fullname" $root }}-webhook
  namespace: {{ $root.Release.Namespace }}
  path: {{ $path | quote }}
  port: 443
{{- end }}
{{- with $root.Values.webhook.caBundle }}
caBundle: {{ . | b64enc }}
{{- end }}
{{- end -}}

{{/* The namespaces the webhooks apply to. */}}
{{- define "kubesteer.namespaceSelector" -}}
{{- if .Values.webhook.namespaceSelector -}}
{{ toYaml .Values.webhook.namespaceSelector }}
{{- else -}}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: [kube-system, {{ .Release.Namespace }}]
{{- end -}}
{{- end -}}
