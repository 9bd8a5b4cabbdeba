{{/*
The objects' name: <release>-offsetkeeper, or the release's name alone when
it holds "offsetkeeper" (release offsetkeeper gives deploy/kubernetes'
names), or fullnameOverride. At most 52 characters, so that the Service's
<name>-metrics is a DNS label.
*/}}
{{- define "offsetkeeper.fullname" -}}
{{- $name := "" -}}
{{- if .Values.fullnameOverride -}}
{{- $name = .Values.fullnameOverride -}}
{{- else if contains "offsetkeeper" .Release.Name -}}
{{- $name = .Release.Name -}}
{{- else -}}
{{- $name = printf "%s-offsetkeeper" .Release.Name -}}
{{- end -}}
{{- $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{/*
The labels that select the replicas. app.kubernetes.io/name is always
offsetkeeper: the ServiceMonitor makes it the job label, and the alerts
select job="offsetkeeper".
*/}}
{{- define "offsetkeeper.selectorLabels" -}}
app.kubernetes.io/name: offsetkeeper
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "offsetkeeper.labels" -}}
{{ include "offsetkeeper.selectorLabels" . }}
app.kubernetes.io/version: {{ include "offsetkeeper.imageTag" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{- define "offsetkeeper.imageTag" -}}
{{- .Values.image.tag | default .Chart.AppVersion | toString -}}
{{- end -}}

{{- define "offsetkeeper.secretName" -}}
{{- .Values.secrets.existingSecret | default (printf "%s-secrets" (include "offsetkeeper.fullname" .)) -}}
{{- end -}}

{{/* Whether the chart creates the passwords' Secret: "true" or "". */}}
{{- define "offsetkeeper.createSecret" -}}
{{- $s := .Values.secrets -}}
{{- if or $s.postgresPassword $s.etcdPassword $s.kafkaPassword $s.schemaRegistryPassword $s.clickhousePassword -}}true{{- end -}}
{{- end -}}

{{/* The sink's scheme: postgres, clickhouse, stdout, discard, file. */}}
{{- define "offsetkeeper.sinkScheme" -}}
{{- $scheme := regexFind "^[a-zA-Z][a-zA-Z0-9+.-]*:" .Values.sink | trimSuffix ":" | lower -}}
{{- if eq $scheme "postgresql" }}postgres{{ else }}{{ $scheme }}{{ end -}}
{{- end -}}

{{/*
A size of the form NKiB, NMiB, NGiB (bytes) or NKi, NMi, NGi (a quantity) in
KiB, after checking its form. Called with (list what value suffix), suffix
"B" for a byte size and "" for a quantity.
*/}}
{{- define "offsetkeeper.kib" -}}
{{- $what := index . 0 -}}
{{- $v := index . 1 | toString -}}
{{- $suffix := index . 2 -}}
{{- if not (regexMatch (printf "^[1-9][0-9]*[KMG]i%s$" $suffix) $v) -}}
{{- if $suffix -}}
{{- fail (printf "%s %q: want a whole number of KiB, MiB or GiB, such as 256MiB" $what $v) -}}
{{- else -}}
{{- fail (printf "%s %q: want a whole number of Ki, Mi or Gi, such as 512Mi" $what $v) -}}
{{- end -}}
{{- end -}}
{{- $units := dict "K" 1 "M" 1024 "G" 1048576 -}}
{{- mul (regexFind "^[0-9]+" $v | atoi) (get $units (regexFind "[KMG]" $v)) -}}
{{- end -}}

{{/*
The container's memory, request and limit alike: twice maxBufferBytes, or
resources' memory, which must be at least that.
*/}}
{{- define "offsetkeeper.memory" -}}
{{- $buf := .Values.maxBufferBytes | toString -}}
{{- $bufKiB := include "offsetkeeper.kib" (list "maxBufferBytes" $buf "B") | atoi -}}
{{- $req := .Values.resources.requests.memory | default "" | toString -}}
{{- $lim := .Values.resources.limits.memory | default "" | toString -}}
{{- if and $req $lim (ne $req $lim) -}}
{{- fail (printf "resources.requests.memory %s and resources.limits.memory %s: want them equal (a replica over its request is the first evicted)" $req $lim) -}}
{{- end -}}
{{- $mem := $lim | default $req -}}
{{- if $mem -}}
{{- $kib := include "offsetkeeper.kib" (list "resources' memory" $mem "") | atoi -}}
{{- if lt $kib (mul 2 $bufKiB) -}}
{{- fail (printf "resources' memory %s is under twice maxBufferBytes (%s): the records take up to maxBufferBytes and the rest as much again; raise the memory or lower maxBufferBytes" $mem $buf) -}}
{{- end -}}
{{- $mem -}}
{{- else -}}
{{- printf "%d%si" (mul 2 (regexFind "^[0-9]+" $buf | atoi)) (regexFind "[KMG]" $buf) -}}
{{- end -}}
{{- end -}}

{{/*
shutdownTimeout in seconds, after checking its form (h, m and s, as 30s,
2m or 1m30s, above 0).
*/}}
{{- define "offsetkeeper.shutdownSeconds" -}}
{{- $d := .Values.shutdownTimeout | toString -}}
{{- if or (eq $d "") (not (regexMatch "^([0-9]+h)?([0-9]+m)?([0-9]+s)?$" $d)) -}}
{{- fail (printf "shutdownTimeout %q: want a duration in h, m and s, such as 30s, 2m or 1m30s" $d) -}}
{{- end -}}
{{- $h := regexFind "[0-9]+h" $d | trimSuffix "h" | default "0" | atoi -}}
{{- $m := regexFind "[0-9]+m" $d | trimSuffix "m" | default "0" | atoi -}}
{{- $s := regexFind "[0-9]+s" $d | trimSuffix "s" | default "0" | atoi -}}
{{- $secs := add (mul $h 3600) (mul $m 60) $s -}}
{{- if eq $secs 0 -}}
{{- fail (printf "shutdownTimeout %q: must be above 0 (the blocks in flight need time to finish)" $d) -}}
{{- end -}}
{{- $secs -}}
{{- end -}}

{{/*
Checks the values no schema can: what is required, and what must go
together. Renders nothing.
*/}}
{{- define "offsetkeeper.validate" -}}
{{- $v := .Values -}}
{{- $errs := list -}}
{{- if not $v.group -}}
{{- $errs = append $errs "group is required: the group (pipeline) name, --group (e.g. --set group=orders)" -}}
{{- end -}}
{{- if not $v.topics -}}
{{- $errs = append $errs "topics is required: the topics to consume, a list (e.g. --set 'topics={orders,refunds}')" -}}
{{- end -}}
{{- if not $v.sink -}}
{{- $errs = append $errs "sink is required: where records go, e.g. postgres://offsetkeeper@postgres:5432/offsetkeeper?table=orders (password in secrets) or clickhouse://..." -}}
{{- end -}}
{{- if not $v.etcdEndpoints -}}
{{- $errs = append $errs "etcdEndpoints is required: etcd's client endpoints, a list of host:port (e.g. --set 'etcdEndpoints={etcd-0.etcd:2379,etcd-1.etcd:2379}')" -}}
{{- end -}}
{{- if not $v.brokers -}}
{{- $errs = append $errs "brokers is required: Kafka's bootstrap brokers, a list of host:port (e.g. --set 'brokers={kafka:9092}')" -}}
{{- end -}}
{{- if $v.sink -}}
{{- $scheme := include "offsetkeeper.sinkScheme" . -}}
{{- if eq $scheme "file" -}}
{{- $errs = append $errs (printf "sink %q: a file:// sink writes into the pod, whose filesystem is read-only and lost with it, while partitions move between replicas; use postgres:// or clickhouse://" $v.sink) -}}
{{- else if not (has $scheme (list "postgres" "clickhouse" "stdout" "discard")) -}}
{{- $errs = append $errs (printf "sink %q: want postgres://, clickhouse://, stdout: or discard:" $v.sink) -}}
{{- end -}}
{{- if regexMatch "^[a-zA-Z]+://[^/@]*:[^/@]*@" $v.sink -}}
{{- $errs = append $errs "sink: a password in the URL would be in the ConfigMap; give it in secrets (postgresPassword, clickhousePassword) or an existing Secret (secrets.existingSecret)" -}}
{{- end -}}
{{- $s := $v.secrets -}}
{{- if and $s.existingSecret (include "offsetkeeper.createSecret" .) -}}
{{- $errs = append $errs "secrets: give secrets.existingSecret or the passwords (secrets.postgresPassword, ...), not both" -}}
{{- end -}}
{{- if and (eq $scheme "postgres") (not $s.existingSecret) (not $s.postgresPassword) -}}
{{- $errs = append $errs (printf "sink %q is PostgreSQL: its password is required, as secrets.existingSecret (a Secret with the key postgres-password) or secrets.postgresPassword" $v.sink) -}}
{{- end -}}
{{- if and $s.postgresPassword (ne $scheme "postgres") -}}
{{- $errs = append $errs (printf "secrets.postgresPassword: the sink %q is not postgres://" $v.sink) -}}
{{- end -}}
{{- if and $s.clickhousePassword (ne $scheme "clickhouse") -}}
{{- $errs = append $errs (printf "secrets.clickhousePassword: the sink %q is not clickhouse://" $v.sink) -}}
{{- end -}}
{{- end -}}
{{- $s := $v.secrets -}}
{{- range $pw, $user := dict "etcdPassword" "OFFSETKEEPER_ETCD_USER" "kafkaPassword" "OFFSETKEEPER_KAFKA_USER" "schemaRegistryPassword" "OFFSETKEEPER_SCHEMA_REGISTRY_USER" -}}
{{- if and (get $s $pw) (not (get $v.settings $user)) -}}
{{- $errs = append $errs (printf "secrets.%s needs its user: settings.%s (a password without a user is refused)" $pw $user) -}}
{{- end -}}
{{- end -}}
{{- $own := dict "OFFSETKEEPER_GROUP" "group" "OFFSETKEEPER_TOPICS" "topics" "OFFSETKEEPER_SINK" "sink" "OFFSETKEEPER_ETCD_ENDPOINTS" "etcdEndpoints" "OFFSETKEEPER_BROKERS" "brokers" "OFFSETKEEPER_MAX_BUFFER_BYTES" "maxBufferBytes" "OFFSETKEEPER_SHUTDOWN_TIMEOUT" "shutdownTimeout" "OFFSETKEEPER_HTTP_ADDR" "httpPort" -}}
{{- range $k, $_ := $v.settings -}}
{{- if eq $k "OFFSETKEEPER_REPLICA_ID" -}}
{{- $errs = append $errs "settings.OFFSETKEEPER_REPLICA_ID: each replica's ID is its pod's name (unique among the live pods), not a setting" -}}
{{- else if hasKey $own $k -}}
{{- $errs = append $errs (printf "settings.%s: set it with the value %s" $k (get $own $k)) -}}
{{- else if hasSuffix "_PASSWORD" $k -}}
{{- $errs = append $errs (printf "settings.%s: a password goes in secrets (or an existing Secret: secrets.existingSecret), not in the ConfigMap" $k) -}}
{{- end -}}
{{- end -}}
{{- if eq (len $errs) 1 -}}
{{- fail (first $errs) -}}
{{- else if $errs -}}
{{- fail (printf "%d values to fix:\n  - %s" (len $errs) (join "\n  - " $errs)) -}}
{{- end -}}
{{- end -}}
