{{/* Names, labels and the pieces every workload shares. */}}

{{- define "lucius.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "lucius.fullname" -}}
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

{{- define "lucius.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "lucius.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: lucius
{{- end -}}

{{/* selectorLabels: dict "root" $ "component" "gateway" [ "pool" "ocr" ] */}}
{{- define "lucius.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lucius.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- if .pool }}
lucius.dev/worker-pool: {{ .pool }}
{{- end }}
{{- end -}}

{{- define "lucius.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "lucius.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "lucius.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The ports of each service: gRPC and HTTP (REST, /healthz, /readyz, /metrics). */}}
{{- define "lucius.ports" -}}
gateway: {grpc: 9090, http: 8080}
orchestrator: {grpc: 9091, http: 8081}
reconciler: {grpc: 9093, http: 8083}
scheduler: {grpc: 9094, http: 8084}
worker: {http: 8090}
{{- end -}}

{{/* The ConfigMap's data: what every process reads. */}}
{{- define "lucius.config" -}}
{{- $c := .Values.config -}}
LUCIUS_BUS: {{ $c.bus | quote }}
LUCIUS_TOPOLOGY: {{ $c.topology | quote }}
LUCIUS_LOG_LEVEL: {{ $c.logLevel | quote }}
LUCIUS_LOG_FORMAT: {{ $c.logFormat | quote }}
LUCIUS_WORKSPACE_ROOT: {{ $c.workspaceRoot | quote }}
{{- with $c.fileRoots }}
LUCIUS_FILE_ROOTS: {{ . | quote }}
{{- end }}
{{- with $c.otlpEndpoint }}
OTEL_EXPORTER_OTLP_ENDPOINT: {{ . | quote }}
{{- end }}
{{- if eq $c.bus "servicebus" }}
LUCIUS_SERVICEBUS_PROVISION: {{ $c.serviceBus.provision | toString | quote }}
{{- with $c.serviceBus.namespace }}
LUCIUS_SERVICEBUS_NAMESPACE: {{ . | quote }}
{{- end }}
{{- end }}
{{- with $c.auth.issuers }}
LUCIUS_AUTH_ISSUERS: {{ . | quote }}
{{- end }}
LUCIUS_AUTH_AUDIENCE: {{ $c.auth.audience | quote }}
{{- with $c.auth.roleValues }}
LUCIUS_AUTH_ROLE_VALUES: {{ . | quote }}
{{- end }}
{{- with $c.auth.tenantsClaim }}
LUCIUS_AUTH_TENANTS_CLAIM: {{ . | quote }}
{{- end }}
{{- with $c.auth.servicesClaim }}
LUCIUS_AUTH_SERVICES_CLAIM: {{ . | quote }}
{{- end }}
{{- if $c.auth.jwksFile }}
LUCIUS_AUTH_JWKS_FILE: {{ printf "%s/jwks.json" (include "lucius.secretsDir" .) | quote }}
LUCIUS_AUTH_JWKS_ISSUER: {{ $c.auth.jwksIssuer | quote }}
{{- end }}
{{- range $k, $v := $c.extra }}
{{ $k }}: {{ $v | toString | quote }}
{{- end }}
{{- end -}}

{{/* Where secret files are mounted, and the Secrets read as variables. */}}
{{- define "lucius.secretsDir" -}}/var/run/lucius/secrets{{- end -}}

{{- define "lucius.coreSecretName" -}}
{{- if eq .Values.secrets.provider "keyvault" -}}
{{- printf "%s-core" (include "lucius.fullname" .) -}}
{{- else -}}
{{- .Values.secrets.kubernetes.coreSecretName -}}
{{- end -}}
{{- end -}}

{{- define "lucius.workerSecretName" -}}
{{- if eq .Values.secrets.provider "keyvault" -}}
{{- printf "%s-workers" (include "lucius.fullname" .) -}}
{{- else -}}
{{- .Values.secrets.kubernetes.workerSecretName -}}
{{- end -}}
{{- end -}}

{{/* The secrets volume of core services (kind "core") or workers ("workers"). */}}
{{- define "lucius.secretsVolume" -}}
- name: secrets
{{- if eq .root.Values.secrets.provider "keyvault" }}
  csi:
    driver: secrets-store.csi.k8s.io
    readOnly: true
    volumeAttributes:
      secretProviderClass: {{ include "lucius.fullname" .root }}-{{ .kind }}
{{- else }}
  secret:
    secretName: {{ if eq .kind "core" }}{{ include "lucius.coreSecretName" .root }}{{ else }}{{ include "lucius.workerSecretName" .root }}{{ end }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{/* env: the pod's instance name and the database URL (from a Secret). */}}
{{- define "lucius.commonEnv" -}}
- name: LUCIUS_INSTANCE
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .secretName }}
      key: database-url
{{- end -}}

{{- define "lucius.podLabels" -}}
{{- if .Values.workloadIdentity.enabled -}}
azure.workload.identity/use: "true"
{{- end -}}
{{- end -}}

{{/* probes: dict "port" "http" "probes" .Values.probes */}}
{{- define "lucius.probes" -}}
startupProbe:
  httpGet: {path: /healthz, port: {{ .port }}}
  periodSeconds: {{ .probes.startup.periodSeconds }}
  failureThreshold: {{ .probes.startup.failureThreshold }}
  timeoutSeconds: {{ .probes.startup.timeoutSeconds }}
readinessProbe:
  httpGet: {path: /readyz, port: {{ .port }}}
  periodSeconds: {{ .probes.readiness.periodSeconds }}
  failureThreshold: {{ .probes.readiness.failureThreshold }}
  timeoutSeconds: {{ .probes.readiness.timeoutSeconds }}
livenessProbe:
  httpGet: {path: /healthz, port: {{ .port }}}
  periodSeconds: {{ .probes.liveness.periodSeconds }}
  failureThreshold: {{ .probes.liveness.failureThreshold }}
  timeoutSeconds: {{ .probes.liveness.timeoutSeconds }}
{{- end -}}

{{/* The bus paths a receiver drains, for KEDA's PostgreSQL scaler: dict "root" $ "services" (list) */}}
{{- define "lucius.directivePaths" -}}
{{- $paths := list -}}
{{- $topology := .root.Values.config.topology -}}
{{- range $svc := .services -}}
{{- range $lane := list "default" "burst" -}}
{{- range $p := until 16 -}}
{{- if eq $topology "one-topic-set" -}}
{{- $paths = append $paths (printf "global-bus-p%d/subscriptions/%s-%s" $p $svc $lane) -}}
{{- else -}}
{{- $paths = append $paths (printf "global-%s-p%d/subscriptions/%s" $lane $p $svc) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $paths | uniq | join "," -}}
{{- end -}}

{{/* The SQL the PostgreSQL scaler runs: active messages (enqueued, locked
     or not, not scheduled for later) of the given paths, as bus/pgbus's depth
     query counts them (lucius_bus_queue_depth{state="active"}). */}}
{{- define "lucius.pgDepthQuery" -}}
{{- $quoted := list -}}
{{- range (splitList "," .) -}}
{{- $quoted = append $quoted (printf "'%s'" .) -}}
{{- end -}}
SELECT count(*) FROM bus_messages WHERE path IN ({{ join ", " $quoted }}) AND enqueued_at <= now()
{{- end -}}
