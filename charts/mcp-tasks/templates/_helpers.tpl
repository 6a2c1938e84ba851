{{/* Resource-name prefix: <release>-mcp-tasks, or the release name when it already says mcp-tasks. */}}
{{- define "mcp-tasks.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "mcp-tasks.labels" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: mcp-tasks
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: include with (dict "root" $ "component" "gateway"). */}}
{{- define "mcp-tasks.selector" -}}
app.kubernetes.io/name: {{ default .root.Chart.Name .root.Values.nameOverride }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "mcp-tasks.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "mcp-tasks.gatewayAccount" -}}
{{- if .Values.serviceAccounts.create -}}{{ include "mcp-tasks.fullname" . }}-gateway{{- else -}}{{ required "serviceAccounts.gatewayName is required when serviceAccounts.create is false" .Values.serviceAccounts.gatewayName }}{{- end -}}
{{- end -}}

{{- define "mcp-tasks.operatorAccount" -}}
{{- if .Values.serviceAccounts.create -}}{{ include "mcp-tasks.fullname" . }}-operator{{- else -}}{{ required "serviceAccounts.operatorName is required when serviceAccounts.create is false" .Values.serviceAccounts.operatorName }}{{- end -}}
{{- end -}}

{{- define "mcp-tasks.claim" -}}
{{- default (printf "%s-data" (include "mcp-tasks.fullname" .)) .Values.persistence.existingClaim -}}
{{- end -}}

{{/* The worker API as tool Pods reach it: the operator Service's DNS name, https with a certificate. */}}
{{- define "mcp-tasks.workerUrl" -}}
{{- $scheme := ternary "https" "http" (ne (include "mcp-tasks.workerTlsSecret" .) "") -}}
{{- printf "%s://%s-operator.%s.svc:%d" $scheme (include "mcp-tasks.fullname" .) .Release.Namespace (int .Values.operator.workerPort) -}}
{{- end -}}

{{/* The kubernetes.io/tls Secret of the warm workers' certificate: tls.warmWorkers.secretName, else the one the
cert-manager Certificate writes; empty: plain HTTP. */}}
{{- define "mcp-tasks.warmTlsSecret" -}}
{{- if .Values.tls.warmWorkers.secretName -}}
{{- .Values.tls.warmWorkers.secretName -}}
{{- else if .Values.tls.certManager.issuerRef.name -}}
{{- printf "%s-warm-workers-tls" (include "mcp-tasks.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* For the gateway and operator pods, which call warm workers: the CA they verify them with (ca.crt of that
Secret only), as the variable, the mount and the volume. */}}
{{- define "mcp-tasks.warmTlsEnv" -}}
{{- if include "mcp-tasks.warmTlsSecret" . }}
- {name: MCPTASKS_WARM_TLS_CA_FILE, value: /etc/mcptasks/warm-tls/ca.crt}
{{- end }}
{{- end -}}

{{- define "mcp-tasks.warmTlsMount" -}}
{{- if include "mcp-tasks.warmTlsSecret" . }}
- {name: warm-tls-ca, mountPath: /etc/mcptasks/warm-tls, readOnly: true}
{{- end }}
{{- end -}}

{{- define "mcp-tasks.warmTlsVolume" -}}
{{- with include "mcp-tasks.warmTlsSecret" . }}
- name: warm-tls-ca
  secret: {secretName: {{ . }}, defaultMode: 0444, items: [{key: ca.crt, path: ca.crt}]}
{{- end }}
{{- end -}}

{{/* The kubernetes.io/tls Secret of the worker API's certificate: tls.workerApi.secretName, else the one the
cert-manager Certificate (templates/tls.yaml) writes; empty: plain HTTP. */}}
{{- define "mcp-tasks.workerTlsSecret" -}}
{{- if .Values.tls.workerApi.secretName -}}
{{- .Values.tls.workerApi.secretName -}}
{{- else if .Values.tls.certManager.issuerRef.name -}}
{{- printf "%s-worker-api-tls" (include "mcp-tasks.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The restricted Pod Security profile: pod level, then container level. */}}
{{- define "mcp-tasks.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{- define "mcp-tasks.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities: {drop: [ALL]}
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{/* NetworkPolicy ingress rule admitting scrapers to the `metrics` port (nothing when metrics are off). */}}
{{- define "mcp-tasks.metricsIngress" -}}
{{- if .Values.metrics.port }}
- ports:
    - {port: metrics, protocol: TCP}
  {{- with .Values.metrics.from }}
  from:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end }}

{{/* Where artifacts go, as environment variables of the gateway and the operator: an S3 bucket
(`artifacts.s3.*`; credentials from a Secret, else the SDK's chain), or nothing (files on the claim). */}}
{{- define "mcp-tasks.artifactsEnv" -}}
{{- with .Values.artifacts.s3 }}
{{- if .bucket }}
- {name: MCPTASKS_S3_BUCKET, value: {{ .bucket | quote }}}
- {name: MCPTASKS_S3_PREFIX, value: {{ .prefix | quote }}}
- {name: MCPTASKS_S3_ENDPOINT_URL, value: {{ .endpoint | quote }}}
- {name: MCPTASKS_S3_REGION, value: {{ .region | quote }}}
- {name: MCPTASKS_S3_PATH_STYLE, value: {{ .pathStyle | quote }}}
- {name: MCPTASKS_S3_SSE, value: {{ .sse | quote }}}
{{- if .existingSecret }}
- name: MCPTASKS_S3_ACCESS_KEY_ID
  valueFrom: {secretKeyRef: {name: {{ .existingSecret }}, key: {{ .accessKeyIdKey }}}}
- name: MCPTASKS_S3_SECRET_ACCESS_KEY
  valueFrom: {secretKeyRef: {name: {{ .existingSecret }}, key: {{ .secretAccessKeyKey }}}}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "mcp-tasks.warmCallSecret" -}}
{{- printf "%s-warm-call" (include "mcp-tasks.fullname" .) -}}
{{- end -}}

{{/* The operator's warm-call key (templates/warm-call.yaml), for the operator and gateway pods only: the
variable, the mount and the volume. */}}
{{- define "mcp-tasks.warmCallEnv" -}}
- {name: MCPTASKS_WARM_CALL_KEY_FILE, value: /etc/mcptasks/warm-call/warm-call.key}
{{- end -}}

{{- define "mcp-tasks.warmCallMount" -}}
- {name: warm-call, mountPath: /etc/mcptasks/warm-call, readOnly: true}
{{- end -}}

{{- define "mcp-tasks.warmCallVolume" -}}
- name: warm-call
  secret: {secretName: {{ include "mcp-tasks.warmCallSecret" . }}, defaultMode: 0440}
{{- end -}}

{{- define "mcp-tasks.requestStateSecret" -}}
{{- printf "%s-request-state" (include "mcp-tasks.fullname" .) -}}
{{- end -}}

{{/* The data folder: the ReadWriteMany claim; with an S3 bucket an emptyDir, with the shared requestState
key mounted into it from the chart's Secret for the gateways (which all hold the same key). Called with
(dict "root" $ "requestState" true) by the gateway, false by the operator, which never reads that key. */}}
{{- define "mcp-tasks.dataMounts" -}}
- {name: data, mountPath: /var/lib/mcptasks}
{{- if and .root.Values.artifacts.s3.bucket .requestState }}
- {name: request-state, mountPath: /var/lib/mcptasks/request-state.key, subPath: request-state.key, readOnly: true}
{{- end }}
{{- end -}}

{{- define "mcp-tasks.dataVolumes" -}}
{{- if .root.Values.artifacts.s3.bucket }}
- name: data
  emptyDir: {sizeLimit: 64Mi}
{{- if .requestState }}
- name: request-state
  secret: {secretName: {{ include "mcp-tasks.requestStateSecret" .root }}, defaultMode: 0440}
{{- end }}
{{- else }}
- name: data
  persistentVolumeClaim: {claimName: {{ include "mcp-tasks.claim" .root }}}
{{- end }}
{{- end -}}

{{/* The port of an http(s) URL: its explicit port, else 443 (https) or 80 (http). */}}
{{- define "mcp-tasks.urlPort" -}}
{{- $url := urlParse . -}}
{{- $host := splitList ":" $url.host -}}
{{- if gt (len $host) 1 -}}{{ last $host }}{{- else if eq $url.scheme "http" -}}80{{- else -}}443{{- end -}}
{{- end -}}

{{/* NetworkPolicy egress rule: DNS (networkPolicy.egress.dns, port 53 over UDP and TCP). */}}
{{- define "mcp-tasks.dnsEgress" -}}
- ports:
    - {port: 53, protocol: UDP}
    - {port: 53, protocol: TCP}
  {{- with .Values.networkPolicy.egress.dns }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/* Egress rules shared by the gateways and the operators: DNS, the API server (its CIDRs and ports, or
any address on its ports), this release's warm workers (any port: each tool chooses its own), the
artifact store's port with artifacts.s3 (any address), and networkPolicy.egress.componentAllow. */}}
{{- define "mcp-tasks.componentEgress" -}}
{{- $egress := .Values.networkPolicy.egress -}}
{{ include "mcp-tasks.dnsEgress" . }}
# the API server
- ports:
    {{- range $egress.apiServer.ports }}
    - {port: {{ . }}, protocol: TCP}
    {{- end }}
  {{- with $egress.apiServer.cidrs }}
  to:
    {{- range . }}
    - ipBlock: {cidr: {{ . | quote }}}
    {{- end }}
  {{- end }}
# this release's warm workers
- to:
    - podSelector:
        matchLabels:
          app.kubernetes.io/managed-by: mcp-tasks
          app.kubernetes.io/component: warm-worker
          app.kubernetes.io/instance: {{ .Release.Name }}
{{- if .Values.artifacts.s3.bucket }}
# the artifact store (artifacts.s3)
- ports:
    - {port: {{ include "mcp-tasks.urlPort" (default "https://s3.amazonaws.com" .Values.artifacts.s3.endpoint) }}, protocol: TCP}
{{- end }}
{{- with $egress.componentAllow }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
The `limits` settings group (docs/fair-share.md) as MCPTASKS_* variables: one source for the gateway (quota,
creation rates) and the operator (running budgets).
*/}}
{{- define "mcp-tasks.limitsEnv" -}}
{{- with .Values.limits -}}
- {name: MCPTASKS_MAX_RUNNING_PER_TENANT, value: {{ .maxRunningPerTenant | int64 | quote }}}
- {name: MCPTASKS_MAX_RUNNING_PER_PRINCIPAL, value: {{ .maxRunningPerPrincipal | int64 | quote }}}
- {name: MCPTASKS_MAX_UNFINISHED_PER_PRINCIPAL, value: {{ .maxUnfinishedPerPrincipal | int64 | quote }}}
- {name: MCPTASKS_TASK_CREATE_RATE_PER_PRINCIPAL, value: {{ .taskCreateRatePerPrincipal | quote }}}
- {name: MCPTASKS_TASK_CREATE_BURST_PER_PRINCIPAL, value: {{ .taskCreateBurstPerPrincipal | int64 | quote }}}
- {name: MCPTASKS_TASK_CREATE_RATE_PER_TENANT, value: {{ .taskCreateRatePerTenant | quote }}}
- {name: MCPTASKS_TASK_CREATE_BURST_PER_TENANT, value: {{ .taskCreateBurstPerTenant | int64 | quote }}}
- {name: MCPTASKS_TENANT_LIMITS, value: {{ if .tenants }}{{ toJson .tenants | quote }}{{ else }}""{{ end }}}
- {name: MCPTASKS_METRICS_TENANTS, value: {{ join "," .metricsTenants | quote }}}
{{- end -}}
{{- end -}}
