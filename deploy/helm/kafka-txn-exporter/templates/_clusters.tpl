{{/*
Cluster files (values clusterFiles; config cluster_files): a fleet managed file by file. The
files come from clusterFiles.files (rendered into the ConfigMap <fullname>-clusters, one key
<name>.yml per cluster; a change rolls the pod through the config checksum) or from
clusterFiles.existingConfigMap (yours; SIGHUP reloads it). Either is mounted read-only at
clusterFiles.path and config.cluster_files is set to that path.

  kafka-txn-exporter.clusterFilesUsed        "true" when clusterFiles is used
  kafka-txn-exporter.clusterFilesConfigMap   the ConfigMap's name
  kafka-txn-exporter.clusterFilesConfig      sets or checks the config's cluster_files; call
                                             with (dict "root" . "config" $cfg)
  kafka-txn-exporter.clusterFilesData        the rendered ConfigMap's data (checksummed)
*/}}
{{- define "kafka-txn-exporter.clusterFilesUsed" -}}
{{- $c := .Values.clusterFiles | default dict -}}
{{- if or $c.files $c.existingConfigMap -}}true{{- end -}}
{{- end -}}

{{- define "kafka-txn-exporter.clusterFilesConfigMap" -}}
{{- $c := .Values.clusterFiles | default dict -}}
{{- if $c.existingConfigMap -}}
{{- $c.existingConfigMap -}}
{{- else -}}
{{- printf "%s-clusters" (include "kafka-txn-exporter.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kafka-txn-exporter.clusterFilesConfig" -}}
{{- $c := .root.Values.clusterFiles | default dict -}}
{{- $given := toString (get .config "cluster_files" | default "") | trimSuffix "/" -}}
{{- if and $c.files $c.existingConfigMap -}}
{{- fail "clusterFiles: set files or existingConfigMap, not both" -}}
{{- end -}}
{{- if include "kafka-txn-exporter.clusterFilesUsed" .root -}}
{{- if and $given (ne $given (trimSuffix "/" $c.path)) -}}
{{- fail (printf "config.cluster_files %q is not clusterFiles.path %q, where the chart mounts the cluster files: leave config.cluster_files unset" $given $c.path) -}}
{{- end -}}
{{- $_ := set .config "cluster_files" $c.path -}}
{{- else if not (get .config "clusters") -}}
{{- if not $given -}}
{{- fail "config.clusters is empty: give at least one cluster there or in clusterFiles" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kafka-txn-exporter.clusterFilesData" -}}
{{- range $name, $cluster := (.Values.clusterFiles.files | default dict) }}
{{ $name }}.yml: |
  {{- toYaml $cluster | nindent 2 }}
{{- end }}
{{- end -}}
