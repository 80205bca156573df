{{/*
Named templates. The ones a parent chart includes in sidecar mode take this chart's own
context, which Helm offers the parent as (index .Subcharts "kafka-txn-exporter"):
  kafka-txn-exporter.container       the exporter container, one list item
  kafka-txn-exporter.volumes         the volumes that container mounts, list items
  kafka-txn-exporter.podAnnotations  config checksum (and scrape annotations), map entries
*/}}

{{- define "kafka-txn-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kafka-txn-exporter.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kafka-txn-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kafka-txn-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kafka-txn-exporter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kafka-txn-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: exporter
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "kafka-txn-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kafka-txn-exporter.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The exporter's image: the full image (embedded Spark driver), or in spark.mode connect the thin
image (Dockerfile target thin: no JVM, no Spark jars), image.thin.* defaulting to the same
repository and the full image's tag + "-thin".
*/}}
{{- define "kafka-txn-exporter.image" -}}
{{- $image := .Values.image -}}
{{- $repo := $image.repository -}}
{{- $tag := default .Chart.AppVersion $image.tag | toString -}}
{{- $digest := $image.digest -}}
{{- if eq ((.Values.spark | default dict).mode | default "embedded") "connect" -}}
{{- $thin := $image.thin | default dict -}}
{{- $repo = $thin.repository | default $repo -}}
{{- $tag = $thin.tag | default (printf "%s-thin" $tag) | toString -}}
{{- $digest = $thin.digest -}}
{{- end -}}
{{- if $image.registry -}}
{{- $repo = printf "%s/%s" (trimSuffix "/" $image.registry) $repo -}}
{{- end -}}
{{- if $digest -}}
{{- printf "%s@%s" $repo $digest -}}
{{- else -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}
{{- end -}}

{{/* Paths fixed by the image (Dockerfile): config directory and writable scratch. */}}
{{- define "kafka-txn-exporter.configDir" -}}/etc/kafka-txn-exporter{{- end -}}
{{- define "kafka-txn-exporter.homeDir" -}}/home/exporter{{- end -}}
{{- define "kafka-txn-exporter.sparkLocalDir" -}}/var/lib/kafka-txn-exporter/spark{{- end -}}

{{- define "kafka-txn-exporter.secretMountPath" -}}
{{- default (printf "/var/run/secrets/kafka-txn-exporter/%s" .secretName) .mountPath | trimSuffix "/" -}}
{{- end -}}

{{- define "kafka-txn-exporter.secretVolumeName" -}}
{{- printf "kte-secret-%d-%s" .index (.secretName | lower | replace "." "-") | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The exporter's config file: .Values.config with the values the pod layout dictates
(web.listen_address from .Values.port, spark.local_dir on the scratch emptyDir, state_dir on the
stateDir volume), after checks
that keep secrets out of values and kafka_files pointing at mounted files.
*/}}
{{- define "kafka-txn-exporter.configYaml" -}}
{{- $cfg := deepCopy (.Values.config | default dict) -}}
{{- $port := int .Values.port -}}
{{- $web := get $cfg "web" | default dict -}}
{{- if get $web "listen_address" -}}
{{- $given := toString (get $web "listen_address") -}}
{{- if ne (last (splitList ":" $given)) (toString $port) -}}
{{- fail (printf "config.web.listen_address %q does not listen on port %d: leave it unset (the chart derives it from .Values.port) or change port" $given $port) -}}
{{- end -}}
{{- else -}}
{{- $_ := set $web "listen_address" (printf ":%d" $port) -}}
{{- end -}}
{{- $_ := set $cfg "web" $web -}}
{{- $spark := get $cfg "spark" | default dict -}}
{{- if not (get $spark "local_dir") -}}
{{- $_ := set $spark "local_dir" (include "kafka-txn-exporter.sparkLocalDir" .) -}}
{{- end -}}
{{- $spark = merge $spark (include "kafka-txn-exporter.sparkConfigOverlay" . | fromYaml) -}}
{{- $_ := set $cfg "spark" $spark -}}
{{- include "kafka-txn-exporter.historyConfig" (dict "root" . "config" $cfg) -}}
{{- include "kafka-txn-exporter.stateConfig" (dict "root" . "config" $cfg) -}}
{{- include "kafka-txn-exporter.clusterFilesConfig" (dict "root" . "config" $cfg) -}}
{{- include "kafka-txn-exporter.checkSecrets" (dict "root" . "config" $cfg) -}}
{{- toYaml $cfg -}}
{{- end -}}

{{- define "kafka-txn-exporter.checkSecrets" -}}
{{- $mounts := list -}}
{{- range .root.Values.kafkaSecrets -}}
{{- $mounts = append $mounts (include "kafka-txn-exporter.secretMountPath" .) -}}
{{- end -}}
{{- range .root.Values.extraVolumeMounts -}}
{{- $mounts = append $mounts (trimSuffix "/" .mountPath) -}}
{{- end -}}
{{- /* librdkafka properties that carry secrets (exporter.config.SECRET_PROPERTIES). */ -}}
{{- $secretProps := list "sasl.password" "sasl.oauthbearer.client.secret" "ssl.key.password" "sasl.oauthbearer.config" "ssl.key.pem" "ssl.keystore.password" -}}
{{- /* Every cluster the chart renders: config.clusters[i] and clusterFiles.files.<name>. */ -}}
{{- $clusters := list -}}
{{- range $i, $c := (.config.clusters | default list) -}}
{{- $clusters = append $clusters (dict "where" (printf "config.clusters[%d]" $i) "cluster" $c) -}}
{{- end -}}
{{- range $name, $c := ((.root.Values.clusterFiles | default dict).files | default dict) -}}
{{- $clusters = append $clusters (dict "where" (printf "clusterFiles.files.%s" $name) "cluster" $c) -}}
{{- end -}}
{{- range $clusters -}}
{{- $where := .where -}}
{{- $c := .cluster -}}
{{- range $prop, $value := (get $c "kafka" | default dict) -}}
{{- if and (has $prop $secretProps) (not (regexMatch "^\\$\\{[A-Za-z_][A-Za-z0-9_]*\\}$" (toString $value))) -}}
{{- fail (printf "%s.kafka.%s: a secret must not be a literal in values; mount an existing Secret with kafkaSecrets and set %s.kafka_files.%s to its file path" $where $prop $where $prop) -}}
{{- end -}}
{{- end -}}
{{- range $prop, $path := (get $c "kafka_files" | default dict) -}}
{{- if not (isAbs (toString $path)) -}}
{{- fail (printf "%s.kafka_files.%s: %q must be an absolute path under a kafkaSecrets mountPath" $where $prop $path) -}}
{{- end -}}
{{- $mounted := false -}}
{{- range $mounts -}}
{{- if hasPrefix (printf "%s/" .) (toString $path) -}}
{{- $mounted = true -}}
{{- end -}}
{{- end -}}
{{- if not $mounted -}}
{{- fail (printf "%s.kafka_files.%s: %q is not under any kafkaSecrets[].mountPath or extraVolumeMounts[].mountPath (mounted: %s)" $where $prop $path (join ", " $mounts | default "none")) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kafka-txn-exporter.telemetryPath" -}}
{{- $web := get (.Values.config | default dict) "web" | default dict -}}
{{- get $web "telemetry_path" | default "/metrics" -}}
{{- end -}}

{{- define "kafka-txn-exporter.scrapeAnnotations" -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.port | quote }}
prometheus.io/path: {{ include "kafka-txn-exporter.telemetryPath" . | quote }}
{{- end -}}

{{/* Pod annotations the exporter needs: the config checksum rolls the pod on a config change. */}}
{{- define "kafka-txn-exporter.podAnnotations" -}}
checksum/kafka-txn-exporter-config: {{ printf "%s\n%s" (include "kafka-txn-exporter.configYaml" .) (include "kafka-txn-exporter.clusterFilesData" .) | sha256sum }}
{{- if and .Values.scrapeAnnotations.enabled (eq .Values.scrapeAnnotations.target "pod") }}
{{ include "kafka-txn-exporter.scrapeAnnotations" . }}
{{- end }}
{{- end -}}

{{- define "kafka-txn-exporter.webConfigDir" -}}/var/run/secrets/kafka-txn-exporter/web{{- end -}}
{{- define "kafka-txn-exporter.webTlsDir" -}}/var/run/secrets/kafka-txn-exporter/web-tls{{- end -}}

{{- define "kafka-txn-exporter.httpProbe" -}}
httpGet:
  path: {{ .path }}
  port: metrics
  scheme: {{ .scheme | default "HTTP" }}
{{- with .probe }}
periodSeconds: {{ .periodSeconds }}
timeoutSeconds: {{ .timeoutSeconds }}
failureThreshold: {{ .failureThreshold }}
{{- with .initialDelaySeconds }}
initialDelaySeconds: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The exporter container: the same spec in standalone and sidecar mode. */}}
{{- define "kafka-txn-exporter.container" -}}
- name: {{ .Values.containerName }}
  image: {{ include "kafka-txn-exporter.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args:
    - --config.file
    - {{ include "kafka-txn-exporter.configDir" . }}/config.yml
    {{- if .Values.webConfig.secretName }}
    - --web.config.file
    - {{ include "kafka-txn-exporter.webConfigDir" . }}/{{ .Values.webConfig.key }}
    {{- end }}
  env:
    # `kubectl exec` into this container: find-hanging and list answer from this exporter's
    # last cycle (with TLS or basic auth, add KAFKA_TXN_EXPORTER_CA_FILE and credentials).
    - name: KAFKA_TXN_EXPORTER_URL
      value: {{ printf "%s://127.0.0.1:%v" (.Values.webConfig.tls | ternary "https" "http") .Values.port | quote }}
    {{- with .Values.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: metrics
      containerPort: {{ .Values.port }}
      protocol: TCP
  {{- if .Values.startupProbe.enabled }}
  startupProbe:
    {{- include "kafka-txn-exporter.httpProbe" (dict "path" "/healthz" "probe" .Values.startupProbe "scheme" (.Values.webConfig.tls | ternary "HTTPS" "HTTP")) | nindent 4 }}
  {{- end }}
  {{- if .Values.livenessProbe.enabled }}
  livenessProbe:
    {{- include "kafka-txn-exporter.httpProbe" (dict "path" "/healthz" "probe" .Values.livenessProbe "scheme" (.Values.webConfig.tls | ternary "HTTPS" "HTTP")) | nindent 4 }}
  {{- end }}
  {{- if and .Values.readinessProbe.enabled (or (eq .Values.mode "standalone") .Values.sidecar.readinessProbe) }}
  readinessProbe:
    {{- include "kafka-txn-exporter.httpProbe" (dict "path" "/readyz" "probe" .Values.readinessProbe "scheme" (.Values.webConfig.tls | ternary "HTTPS" "HTTP")) | nindent 4 }}
  {{- end }}
  resources:
    {{- toYaml .Values.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  volumeMounts:
    - name: kte-config
      mountPath: {{ include "kafka-txn-exporter.configDir" . }}
      readOnly: true
    - name: kte-tmp
      mountPath: /tmp
    - name: kte-home
      mountPath: {{ include "kafka-txn-exporter.homeDir" . }}
    - name: kte-spark-local
      mountPath: {{ include "kafka-txn-exporter.sparkLocalDir" . }}
    {{- if include "kafka-txn-exporter.clusterFilesUsed" . }}
    - name: kte-cluster-files
      mountPath: {{ .Values.clusterFiles.path }}
      readOnly: true
    {{- end }}
    {{- include "kafka-txn-exporter.historyVolumeMounts" . | nindent 4 }}
    {{- with include "kafka-txn-exporter.stateVolumeMounts" . | trim }}
    {{- . | nindent 4 }}
    {{- end }}
    {{- range $i, $s := .Values.kafkaSecrets }}
    - name: {{ include "kafka-txn-exporter.secretVolumeName" (dict "index" $i "secretName" $s.secretName) }}
      mountPath: {{ include "kafka-txn-exporter.secretMountPath" $s }}
      readOnly: true
    {{- end }}
    {{- if .Values.webConfig.secretName }}
    - name: kte-web-config
      mountPath: {{ include "kafka-txn-exporter.webConfigDir" . }}
      readOnly: true
    {{- end }}
    {{- if .Values.webConfig.tlsSecretName }}
    - name: kte-web-tls
      mountPath: {{ include "kafka-txn-exporter.webTlsDir" . }}
      readOnly: true
    {{- end }}
    {{- with .Values.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}

{{/* The volumes the exporter container mounts. */}}
{{- define "kafka-txn-exporter.volumes" -}}
- name: kte-config
  configMap:
    name: {{ include "kafka-txn-exporter.fullname" . }}
- name: kte-tmp
  emptyDir:
    {{- include "kafka-txn-exporter.emptyDir" (dict "medium" .Values.scratch.medium "sizeLimit" .Values.scratch.tmpSizeLimit) | nindent 4 }}
- name: kte-home
  emptyDir:
    {{- include "kafka-txn-exporter.emptyDir" (dict "medium" .Values.scratch.medium "sizeLimit" .Values.scratch.homeSizeLimit) | nindent 4 }}
- name: kte-spark-local
  emptyDir:
    {{- include "kafka-txn-exporter.emptyDir" (dict "medium" .Values.scratch.medium "sizeLimit" .Values.scratch.sparkLocalSizeLimit) | nindent 4 }}
{{- if include "kafka-txn-exporter.clusterFilesUsed" . }}
- name: kte-cluster-files
  configMap:
    name: {{ include "kafka-txn-exporter.clusterFilesConfigMap" . }}
{{- end }}
{{- include "kafka-txn-exporter.historyVolumes" . }}
{{- include "kafka-txn-exporter.stateVolumes" . }}
{{- range $i, $s := .Values.kafkaSecrets }}
- name: {{ include "kafka-txn-exporter.secretVolumeName" (dict "index" $i "secretName" $s.secretName) }}
  secret:
    secretName: {{ $s.secretName }}
    defaultMode: {{ hasKey $s "defaultMode" | ternary $s.defaultMode 288 }}
    {{- with $s.items }}
    items:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- if $s.optional }}
    optional: true
    {{- end }}
{{- end }}
{{- with .Values.webConfig.secretName }}
- name: kte-web-config
  secret:
    secretName: {{ . }}
    defaultMode: 288
{{- end }}
{{- with .Values.webConfig.tlsSecretName }}
- name: kte-web-tls
  secret:
    secretName: {{ . }}
    defaultMode: 288
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "kafka-txn-exporter.emptyDir" -}}
{{- $d := dict -}}
{{- with .medium }}{{ $_ := set $d "medium" . }}{{ end -}}
{{- with .sizeLimit }}{{ $_ := set $d "sizeLimit" . }}{{ end -}}
{{- toYaml $d -}}
{{- end -}}

{{/* The Kafka cluster label name (config.cluster_label, default kafka_cluster). */}}
{{- define "kafka-txn-exporter.clusterLabel" -}}
{{- get (.Values.config | default dict) "cluster_label" | default "kafka_cluster" -}}
{{- end -}}

{{/*
The alert rules: files/alerts/kafka-txn-exporter.rules.tmpl.yml (generated by
`python -m alerts.generate`: every alert, tunable values as __KTE_<name>__ placeholders)
filled in from rules.thresholds, config.cluster_label, rules.runbookUrl and the release
namespace; rules.disabled alerts dropped; rules.additionalRuleLabels/Annotations added (an
alert's own labels and annotations win). A clear failure if the file is missing or a
placeholder has no value.
*/}}
{{- define "kafka-txn-exporter.alertRules" -}}
{{- $path := "files/alerts/kafka-txn-exporter.rules.tmpl.yml" -}}
{{- $raw := .Files.Get $path -}}
{{- if not $raw -}}
{{- fail (printf "%s is missing from the chart (generate it with `make alerts`) but prometheusRule or alertmanagerConfig is enabled" $path) -}}
{{- end -}}
{{- $r := .Values.rules -}}
{{- $fill := dict -}}
{{- range $k, $v := $r.thresholds -}}
{{- if kindIs "string" $v -}}
{{- $_ := set $fill $k $v -}}
{{- else -}}
{{- $_ := set $fill $k (toString (int64 $v)) -}}
{{- end -}}
{{- end -}}
{{- if not (get $fill "exporter_job_regex") -}}
{{- /* The job label a ServiceMonitor gives: the Service's name. */ -}}
{{- $_ := set $fill "exporter_job_regex" (include "kafka-txn-exporter.fullname" .) -}}
{{- end -}}
{{- $_ := set $fill "exporter_namespace" .Release.Namespace -}}
{{- $_ := set $fill "cluster_label" (include "kafka-txn-exporter.clusterLabel" .) -}}
{{- $_ := set $fill "runbook_url" $r.runbookUrl -}}
{{- range $k, $v := $fill -}}
{{- $raw = replace (printf "__KTE_%s__" $k) $v $raw -}}
{{- end -}}
{{- $left := regexFindAll "__KTE_[a-z0-9_]+__" $raw -1 | uniq -}}
{{- if $left -}}
{{- fail (printf "rules: no value for %s (set rules.thresholds.<name>)" (join ", " $left)) -}}
{{- end -}}
{{- $rules := fromYaml $raw -}}
{{- if or (hasKey $rules "Error") (not (kindIs "slice" $rules.groups)) -}}
{{- fail (printf "%s: expected a Prometheus rules file with top-level groups: %v" $path (get $rules "Error")) -}}
{{- end -}}
{{- $groups := list -}}
{{- range $rules.groups -}}
{{- $kept := list -}}
{{- range .rules -}}
{{- if not (get ($r.disabled | default dict) .alert) -}}
{{- $rule := deepCopy . -}}
{{- $_ := set $rule "labels" (merge (dict) (.labels | default dict) ($r.additionalRuleLabels | default dict)) -}}
{{- $_ := set $rule "annotations" (merge (dict) (.annotations | default dict) ($r.additionalRuleAnnotations | default dict)) -}}
{{- /* keep_firing_for "0s": left out, as alerts/rules.py does (Prometheus < 2.42 rejects it). */ -}}
{{- if regexMatch "^(0+(ms|s|m|h|d|w|y))+$" (toString (get $rule "keep_firing_for")) -}}
{{- $_ := unset $rule "keep_firing_for" -}}
{{- end -}}
{{- $kept = append $kept $rule -}}
{{- end -}}
{{- end -}}
{{- if $kept -}}
{{- $groups = append $groups (dict "name" .name "rules" $kept) -}}
{{- end -}}
{{- end -}}
{{- toYaml (dict "groups" $groups) -}}
{{- end -}}
