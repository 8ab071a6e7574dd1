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

{{/* The ConfigMap with the CA of the apiserver's client certificate, or nothing when that is off. */}}
{{- define "kubesteer.apiserverClientCA" -}}
{{- $auth := .Values.webhook.apiserverAuth -}}
{{- if and $auth.clientCA $auth.clientCAConfigMap -}}
{{- fail "webhook.apiserverAuth: give clientCA or clientCAConfigMap, not both" -}}
{{- else if $auth.clientCA -}}
{{- include "kubesteer.fullname" . }}-apiserver-client-ca
{{- else if $auth.clientCAConfigMap -}}
{{- $auth.clientCAConfigMap -}}
{{- else if $auth.allowedNames -}}
{{- fail "webhook.apiserverAuth.allowedNames needs clientCA or clientCAConfigMap" -}}
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

{{/* The one image every container runs: it holds kubesteer-webhook, -controller and -certs. */}}
{{- define "kubesteer.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* nodeSelector and tolerations of a pod: the top-level values combined with the pod's own
(nodeSelector merged, its own keys winning; tolerations concatenated, top-level first); takes
(list $ ownNodeSelector ownTolerations). Label and toleration values are rendered as strings, since
`--set key=true` gives a boolean the apiserver would refuse. Renders nothing when both are empty. */}}
{{- define "kubesteer.placement" -}}
{{- $root := index . 0 -}}
{{- $selector := deepCopy ($root.Values.nodeSelector | default dict) -}}
{{- /* set, not merge: merge would let the top level override a component's false or 0. */ -}}
{{- range $key, $value := (index . 1 | default dict) -}}
{{- $_ := set $selector $key $value -}}
{{- end -}}
{{- $tolerations := list -}}
{{- range concat ($root.Values.tolerations | default list) (index . 2 | default list) -}}
{{- $toleration := deepCopy . -}}
{{- if hasKey $toleration "value" -}}
{{- $_ := set $toleration "value" (toString (get $toleration "value")) -}}
{{- end -}}
{{- $tolerations = append $tolerations $toleration -}}
{{- end -}}
{{- with $selector }}
nodeSelector:
  {{- range $key, $value := . }}
  {{ $key | quote }}: {{ toString $value | quote }}
  {{- end }}
{{- end }}
{{- with $tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Where the `helm test` Pod finds the CA the webhook's certificate chains to, as a volume source
with the key ca.crt: the CA the chart renders into the configurations (a ConfigMap, see
kubesteer.testCaConfigMap) outside selfManaged mode, else the ca.crt of the certificate Secret. */}}
{{- define "kubesteer.testCaVolume" -}}
{{- if and (ne .Values.certs.mode "selfManaged") (include "kubesteer.caBundle" .) -}}
configMap:
  name: {{ include "kubesteer.fullname" . }}-test-ca
{{- else -}}
secret:
  secretName: {{ include "kubesteer.certSecret" . }}
{{- end }}
  items:
    - key: ca.crt
      path: ca.crt
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

{{/* The Secret (key monitoring.serviceMonitor.tokenSecret.key) with the token the controller's
ServiceMonitor sends: the one named in values, or the chart's own scraper token. */}}
{{- define "kubesteer.scraperTokenSecret" -}}
{{- default (printf "%s-metrics-scraper-token" (include "kubesteer.fullname" .)) .Values.monitoring.serviceMonitor.tokenSecret.name -}}
{{- end -}}

{{/* Where a scraper finds the CA of the webhook's certificate, as a ServiceMonitor's SecretOrConfigMap
(key ca.crt): as kubesteer.testCaVolume, the rendered CA's ConfigMap outside selfManaged mode, else
the certificate Secret. */}}
{{- define "kubesteer.caSource" -}}
{{- if and (ne .Values.certs.mode "selfManaged") (include "kubesteer.caBundle" .) -}}
configMap:
  name: {{ include "kubesteer.fullname" . }}-test-ca
  key: ca.crt
{{- else -}}
secret:
  name: {{ include "kubesteer.certSecret" . }}
  key: ca.crt
{{- end }}
{{- end -}}
