{{/*
Transaction history (docs/history.md): helpers used by the config, the container and its
volumes when .Values.history.enabled.

  kafka-txn-exporter.historyLocal        "true" when history.path is a directory, not a URL
  kafka-txn-exporter.historyClaimName    the PersistentVolumeClaim mounted at history.path
  kafka-txn-exporter.historyConfig       sets the config's history: section; call with
                                         (dict "root" . "config" $cfg)
  kafka-txn-exporter.historyVolumeMounts volumeMounts list items (may be empty)
  kafka-txn-exporter.historyVolumes      volumes list items (may be empty)
*/}}
{{- define "kafka-txn-exporter.historyLocal" -}}
{{- if not (regexMatch "^[A-Za-z][A-Za-z0-9+.-]*://" (toString .Values.history.path)) -}}true{{- end -}}
{{- end -}}

{{- define "kafka-txn-exporter.historyClaimName" -}}
{{- .Values.history.persistence.existingClaim | default (printf "%s-history" (include "kafka-txn-exporter.fullname" .)) -}}
{{- end -}}

{{- define "kafka-txn-exporter.historyPersistent" -}}
{{- if and .Values.history.enabled .Values.history.persistence.enabled (include "kafka-txn-exporter.historyLocal" .) -}}true{{- end -}}
{{- end -}}

{{- define "kafka-txn-exporter.historyConfig" -}}
{{- $root := .root -}}
{{- if $root.Values.history.enabled -}}
{{- if not $root.Values.history.path -}}
{{- fail "history.path is required when history.enabled is true" -}}
{{- end -}}
{{- $_ := set .config "history" (dict "path" $root.Values.history.path "retention" $root.Values.history.retention "compact_every" $root.Values.history.compactEvery "buffer_cycles" (int $root.Values.history.bufferCycles)) -}}
{{- end -}}
{{- end -}}

{{- define "kafka-txn-exporter.historyVolumeMounts" -}}
{{- if include "kafka-txn-exporter.historyPersistent" . }}
- name: kte-history
  mountPath: {{ .Values.history.path }}
{{- end }}
{{- end -}}

{{- define "kafka-txn-exporter.historyVolumes" -}}
{{- if include "kafka-txn-exporter.historyPersistent" . }}
- name: kte-history
  persistentVolumeClaim:
    claimName: {{ include "kafka-txn-exporter.historyClaimName" . }}
{{- end }}
{{- end -}}
