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
