{{/*
The gateway's authentication settings (docs/security.md): the static token file, OIDC issuers and
ServiceAccount tokens, in any combination; at least one is required (the gateway binds 0.0.0.0).
*/}}
{{- define "mcp-tasks.authEnv" -}}
{{- $auth := .Values.auth -}}
{{- if not (or $auth.existingSecret $auth.oidc.enabled $auth.serviceAccountTokens.enabled) -}}
{{- fail "auth.existingSecret is required unless auth.oidc.enabled (with auth.oidc.issuers) or auth.serviceAccountTokens.enabled: create a Secret with the bearer-token file (kubectl create secret generic mcp-tasks-tokens --from-file=tokens.yaml) and pass --set auth.existingSecret=mcp-tasks-tokens" -}}
{{- end -}}
{{- if and $auth.oidc.enabled (not (or $auth.resourceUri $auth.oidc.audience)) -}}
{{- fail "auth.oidc.enabled needs auth.resourceUri (the MCP endpoint's URI as clients reach it, e.g. https://mcp.example.com/mcp) or auth.oidc.audience: tokens are checked for it" -}}
{{- end -}}
{{- if $auth.existingSecret }}
- {name: MCPTASKS_TOKENS, value: /etc/mcptasks/tokens/{{ $auth.secretKey }}}
{{- end }}
{{- with $auth.resourceUri }}
- {name: MCPTASKS_RESOURCE_URI, value: {{ . | quote }}}
{{- end }}
{{- with $auth.legacyOwnerIssuer }}
- {name: MCPTASKS_LEGACY_OWNER_ISSUER, value: {{ . | quote }}}
{{- end }}
{{- with $auth.issuerTenants }}
{{- $entries := list }}
{{- range $issuer, $patterns := . }}{{- range $patterns }}{{- $entries = append $entries (printf "%s=%s" $issuer .) }}{{- end }}{{- end }}
- {name: MCPTASKS_ISSUER_TENANTS, value: {{ join "," $entries | quote }}}
{{- end }}
{{- if $auth.oidc.enabled }}
- {name: MCPTASKS_OIDC_ISSUER, value: {{ join "," $auth.oidc.issuers | quote }}}
- {name: MCPTASKS_OIDC_SUBJECT_CLAIM, value: {{ $auth.oidc.subjectClaim | quote }}}
{{- with $auth.oidc.audience }}
- {name: MCPTASKS_OIDC_AUDIENCE, value: {{ . | quote }}}
{{- end }}
{{- with $auth.oidc.tenantClaim }}
- {name: MCPTASKS_OIDC_TENANT_CLAIM, value: {{ . | quote }}}
{{- end }}
{{- end }}
{{- if $auth.serviceAccountTokens.enabled }}
- {name: MCPTASKS_SERVICE_ACCOUNT_TOKENS, value: "true"}
{{- with $auth.serviceAccountTokens.audience }}
- {name: MCPTASKS_SERVICE_ACCOUNT_AUDIENCE, value: {{ . | quote }}}
{{- end }}
{{- end }}
{{- end -}}
