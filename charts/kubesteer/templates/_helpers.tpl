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
{{- with include "kubesteer.caBundle" $root }}
caBundle: {{ . | b64enc }}
{{- end }}
{{- end -}}

{{/* The caBundle PEM the chart renders: webhook.caBundle, else the provided mode's. selfManaged and
certManager render none, so `helm upgrade` keeps the value the webhook or cainjector patched in. */}}
{{- define "kubesteer.caBundle" -}}
{{- if .Values.webhook.caBundle -}}
{{- .Values.webhook.caBundle -}}
{{- else if eq .Values.certs.mode "provided" -}}
{{- .Values.certs.provided.caBundle -}}
{{- end -}}
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


{{/* Labels that select one component's pods; takes (list $ "webhook"). */}}
{{- define "kubesteer.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ $root.Chart.Name }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* The webhook's Service, also the stem of the serving certificate's DNS names. */}}
{{- define "kubesteer.webhookService" -}}
{{- include "kubesteer.fullname" . }}-webhook
{{- end -}}

{{/* The cert-manager Certificate of the serving certificate. */}}
{{- define "kubesteer.certificate" -}}
{{- include "kubesteer.fullname" . }}-webhook
{{- end -}}

{{/* The Secret holding the serving certificate, per certs.mode. */}}
{{- define "kubesteer.certSecret" -}}
{{- if eq .Values.certs.mode "provided" -}}
{{- required "certs.provided.secretName is required when certs.mode is provided" .Values.certs.provided.secretName -}}
{{- else if eq .Values.certs.mode "certManager" -}}
{{- include "kubesteer.fullname" . }}-webhook-cert
{{- else -}}
{{- include "kubesteer.fullname" . }}-webhook-tls
{{- end -}}
{{- end -}}

{{/* ServiceAccount names; take (list $ "webhook"). */}}
{{- define "kubesteer.serviceAccountName" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
{{- $sa := (index $root.Values $component).serviceAccount -}}
{{- if $sa.name -}}
{{- $sa.name -}}
{{- else if $sa.create -}}
{{- include "kubesteer.fullname" $root }}-{{ $component }}
{{- else -}}
default
{{- end -}}
{{- end -}}

{{/* image reference; takes (list $ "webhook"). */}}
{{- define "kubesteer.image" -}}
{{- $root := index . 0 -}}
{{- $image := index $root.Values.image (index . 1) -}}
{{- printf "%s:%s" $image.repository (default $root.Chart.AppVersion $image.tag) -}}
{{- end -}}

{{/* The pod affinity: the component's value, or a soft spread over nodes; takes (list $ "webhook"). */}}
{{- define "kubesteer.affinity" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
{{- with (index $root.Values $component).affinity -}}
{{- toYaml . -}}
{{- else -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "kubesteer.selectorLabels" (list $root $component) | nindent 12 }}
{{- end -}}
{{- end -}}

{{/* The controller's leader Lease. */}}
{{- define "kubesteer.leaseName" -}}
{{- default (printf "%s-controller" (include "kubesteer.fullname" .)) .Values.controller.leaseName -}}
{{- end -}}

{{/* certManager mode: cainjector copies the Certificate's CA into every webhook's caBundle. */}}
{{- define "kubesteer.webhookAnnotations" -}}
{{- if eq .Values.certs.mode "certManager" -}}
annotations:
  cert-manager.io/inject-ca-from: {{ printf "%s/%s" .Release.Namespace (include "kubesteer.certificate" .) }}
{{- end -}}
{{- end -}}
