{{/* Labels every object carries (as the Kustomize base's `labels`). */}}
{{- define "imagemap.labels" -}}
app.kubernetes.io/name: imagemap
app.kubernetes.io/part-of: imagemap
{{- end }}

{{/* Labels of the operator's pods, and what selects them. */}}
{{- define "imagemap.selector" -}}
app.kubernetes.io/name: imagemap
app.kubernetes.io/component: operator
{{- end }}

{{/* The operator image. */}}
{{- define "imagemap.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* A flag with a value, when the value is set: `--name=value`, or one per list item. */}}
{{- define "imagemap.flag" -}}
{{- $name := index . 0 }}{{- $value := index . 1 }}
{{- if kindIs "slice" $value }}
{{- if $value }}
- --{{ $name }}={{ join "," $value }}
{{- end }}
{{- else if or (kindIs "bool" $value) (ne (toString $value) "") }}
- --{{ $name }}={{ $value }}
{{- end }}
{{- end }}

{{/* The webhook's port: that of operator.webhookAddr (default 0.0.0.0:8443). */}}
{{- define "imagemap.webhookPort" -}}
{{- $addr := .Values.operator.webhookAddr | default "0.0.0.0:8443" }}
{{- $port := regexFind "[0-9]+$" $addr }}
{{- if not $port }}
{{- fail (printf "operator.webhookAddr %q has no port: with webhook.enabled the operator serves the webhook (to serve none, set webhook.enabled=false)" $addr) }}
{{- end }}
{{- $port }}
{{- end }}

{{/* The namespaces the webhook never maps beyond the system ones and its own:
webhook.excludeNamespaces and operator.webhookExcludeNamespaces, as a JSON list. */}}
{{- define "imagemap.webhookExcluded" -}}
{{- concat .Values.webhook.excludeNamespaces .Values.operator.webhookExcludeNamespaces | uniq | toJson }}
{{- end }}

{{/* The ClusterRole rule for the webhook's configuration: cluster-scoped, so in the
ClusterRole bound cluster-wide (imagemap-operator, or imagemap-operator-cluster when
operator.namespaces binds imagemap-operator in namespaces only). */}}
{{- define "imagemap.webhookConfigurationRule" }}
# The webhook's MutatingWebhookConfiguration, by name only: the leader reads and watches it
# (get; a list and watch by name) and patches its webhooks' caBundle, and nothing else, to
# the CA it keeps in --webhook-secret.
- apiGroups: [admissionregistration.k8s.io]
  resources: [mutatingwebhookconfigurations]
  resourceNames: [{{ .Values.operator.webhookConfiguration | default "imagemap" }}]
  verbs: [get, list, watch, patch]
{{- end }}

{{/* The ClusterRole rule for NeonVM's CRD: cluster-scoped, like the webhook's. */}}
{{- define "imagemap.neonvmCrdRule" }}
# NeonVM's VirtualMachine CRD, by name only (a list and watch with a fieldSelector on
# metadata.name): NeonVM is found at run time, also when it is installed later.
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  resourceNames: [virtualmachines.vm.neon.tech]
  verbs: [list, watch]
{{- end }}
