{{/*
The state directory (config state_dir; docs/operations.md, "Restarts: the state directory"):
helpers used by the config, the container and its volumes. By default an emptyDir at
stateDir.path; with stateDir.persistence.enabled an existing claim (the history claim's volume
is reused when it is that claim); nothing when stateDir.enabled is false.

  kafka-txn-exporter.stateConfig        sets or checks the config's state_dir; call with
                                        (dict "root" . "config" $cfg)
  kafka-txn-exporter.stateVolumeMounts  volumeMounts list items (may be empty)
  kafka-txn-exporter.stateVolumes       volumes list items (may be empty)
*/}}
{{- define "kafka-txn-exporter.stateOnHistoryClaim" -}}
{{- $s := .Values.stateDir -}}
{{- if and $s.enabled $s.persistence.enabled (include "kafka-txn-exporter.historyPersistent" .) (eq $s.persistence.existingClaim (include "kafka-txn-exporter.historyClaimName" .)) -}}true{{- end -}}
{{- end -}}

{{- define "kafka-txn-exporter.stateVolumeName" -}}
{{- if include "kafka-txn-exporter.stateOnHistoryClaim" . -}}kte-history{{- else -}}kte-state{{- end -}}
{{- end -}}

{{- define "kafka-txn-exporter.stateConfig" -}}
{{- $s := .root.Values.stateDir -}}
{{- $given := toString (get .config "state_dir" | default "") | trimSuffix "/" -}}
{{- if $s.enabled -}}
{{- if and $s.persistence.enabled (not $s.persistence.existingClaim) -}}
{{- fail "stateDir.persistence.existingClaim is required when stateDir.persistence.enabled is true (an existing PersistentVolumeClaim; the chart creates none for the state)" -}}
{{- end -}}
{{- if and (include "kafka-txn-exporter.stateOnHistoryClaim" .root) (not $s.persistence.subPath) -}}
{{- fail (printf "stateDir.persistence.existingClaim %q is the history claim: set stateDir.persistence.subPath (e.g. state) to keep the state out of the history's root" $s.persistence.existingClaim) -}}
{{- end -}}
{{- if and $given (ne $given (trimSuffix "/" $s.path)) -}}
{{- fail (printf "config.state_dir %q is not stateDir.path %q, where the chart mounts the state volume: set stateDir.path instead (or stateDir.enabled false and mount a volume there with extraVolumes / extraVolumeMounts)" $given $s.path) -}}
{{- end -}}
{{- $_ := set .config "state_dir" $s.path -}}
{{- else if $given -}}
{{- /* state_dir without the chart's volume: it must be on one of extraVolumeMounts. */ -}}
{{- $mounted := false -}}
{{- range .root.Values.extraVolumeMounts -}}
{{- $m := trimSuffix "/" .mountPath -}}
{{- if or (eq $m $given) (hasPrefix (printf "%s/" $m) $given) -}}
{{- $mounted = true -}}
{{- end -}}
{{- end -}}
{{- if not $mounted -}}
{{- fail (printf "config.state_dir %q is not on a mounted volume (the root filesystem is read-only): set stateDir.enabled true, or mount a volume there with extraVolumes / extraVolumeMounts" $given) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kafka-txn-exporter.stateVolumeMounts" -}}
{{- $s := .Values.stateDir -}}
{{- if $s.enabled }}
- name: {{ include "kafka-txn-exporter.stateVolumeName" . }}
  mountPath: {{ $s.path }}
  {{- if and $s.persistence.enabled $s.persistence.subPath }}
  subPath: {{ $s.persistence.subPath }}
  {{- end }}
{{- end }}
{{- end -}}

{{- define "kafka-txn-exporter.stateVolumes" -}}
{{- $s := .Values.stateDir -}}
{{- if and $s.enabled (not (include "kafka-txn-exporter.stateOnHistoryClaim" .)) }}
- name: kte-state
  {{- if $s.persistence.enabled }}
  persistentVolumeClaim:
    claimName: {{ $s.persistence.existingClaim }}
  {{- else }}
  emptyDir:
    {{- include "kafka-txn-exporter.emptyDir" (dict "medium" $s.medium "sizeLimit" $s.sizeLimit) | nindent 4 }}
  {{- end }}
{{- end }}
{{- end -}}
