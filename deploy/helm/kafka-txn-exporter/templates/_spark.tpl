{{/*
Spark deployment of the exporter (values .spark): embedded (a JVM in the exporter's container)
or connect (no JVM in the exporter; the pipeline runs on a Spark Connect server, by default the
one this chart deploys, templates/spark-connect.yaml).
*/}}
{{- define "kafka-txn-exporter.sparkConnectName" -}}
{{- printf "%s-spark-connect" (include "kafka-txn-exporter.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Not the exporter's selector labels: its Service must never select these pods. */}}
{{- define "kafka-txn-exporter.sparkConnectSelectorLabels" -}}
app.kubernetes.io/name: {{ include "kafka-txn-exporter.sparkConnectName" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kafka-txn-exporter.sparkConnectLabels" -}}
{{ include "kafka-txn-exporter.sparkConnectSelectorLabels" . }}
app.kubernetes.io/component: spark-connect
app.kubernetes.io/part-of: {{ include "kafka-txn-exporter.name" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- range $k, $v := .Values.commonLabels }}
{{ $k }}: {{ $v | quote }}
{{- end }}
{{- end -}}

{{/* The Connect URL the exporter uses in connect mode. */}}
{{- define "kafka-txn-exporter.sparkConnectUrl" -}}
{{- $spark := .Values.spark | default dict -}}
{{- $server := $spark.connectServer | default dict -}}
{{- if $spark.connectUrl -}}
{{- $spark.connectUrl -}}
{{- else if $server.enabled -}}
{{- printf "sc://%s.%s.svc:%d" (include "kafka-txn-exporter.sparkConnectName" .) .Release.Namespace (int ($server.port | default 15002)) -}}
{{- else -}}
{{- fail "spark.mode=connect needs spark.connectServer.enabled=true or spark.connectUrl" -}}
{{- end -}}
{{- end -}}

{{/*
The keys of the exporter's `spark:` config section that .Values.spark decides, as YAML, to be
merged over .Values.config.spark by kafka-txn-exporter.configYaml (a key the user set in
.Values.config.spark wins):
  connect:  connect_url
  embedded: connect_server_port (the CLI's warm engine on 127.0.0.1) when cliEndpointPort > 0
*/}}
{{- define "kafka-txn-exporter.sparkConfigOverlay" -}}
{{- $spark := .Values.spark | default dict -}}
{{- $mode := $spark.mode | default "embedded" -}}
{{- $out := dict -}}
{{- if eq $mode "connect" -}}
{{- $_ := set $out "connect_url" (include "kafka-txn-exporter.sparkConnectUrl" .) -}}
{{- else if eq $mode "embedded" -}}
{{- $embedded := $spark.embedded | default dict -}}
{{- if gt (int ($embedded.cliEndpointPort | default 0)) 0 -}}
{{- $_ := set $out "connect_server_port" (int $embedded.cliEndpointPort) -}}
{{- end -}}
{{- else -}}
{{- fail (printf "spark.mode %q is not embedded or connect" $mode) -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}
