{{- define "drakit.labels" -}}
app.kubernetes.io/name: drakit
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "drakit.selector" -}}
app.kubernetes.io/name: drakit
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "drakit.fullname" -}}{{ .Release.Name }}-drakit{{- end -}}
{{- define "drakit.sa" -}}{{ include "drakit.fullname" . }}-node{{- end -}}
{{- define "drakit.webhookSa" -}}{{ include "drakit.fullname" . }}-webhook{{- end -}}
{{- define "drakit.webhookService" -}}{{ include "drakit.fullname" . }}-webhook{{- end -}}
{{- define "drakit.webhookSecret" -}}
{{- if eq .Values.webhook.tls.source "secret" -}}{{ .Values.webhook.tls.secretName }}{{- else -}}{{ include "drakit.fullname" . }}-webhook-tls{{- end -}}
{{- end -}}

{{- define "drakit.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The enabled backends in pluginOrder, as a JSON list of names; fails when there is none. */}}
{{- define "drakit.enabled" -}}
{{- $names := list -}}
{{- range $name := .Values.pluginOrder -}}
{{- $b := index $.Values.backends $name | default dict -}}
{{- if not (hasKey $.Values.backends $name) -}}
{{- fail (printf "pluginOrder: %q has no entry in backends; add backends.%s or remove it from pluginOrder" $name $name) -}}
{{- end -}}
{{- if $b.enabled -}}{{- $names = append $names $name -}}{{- end -}}
{{- end -}}
{{- range $name, $b := .Values.backends -}}
{{- if and $b.enabled (not (has $name $.Values.pluginOrder)) -}}
{{- fail (printf "backends.%s is enabled but not in pluginOrder; add it to pluginOrder (the load order)" $name) -}}
{{- end -}}
{{- end -}}
{{- if not $names -}}
{{- fail "backends: no backend is enabled; set backends.<name>.enabled=true for at least one (cpu, nvidia_gpu, amd_gpu, amd_ainic, composite)" -}}
{{- end -}}
{{- toJson $names -}}
{{- end -}}

{{/* The driver a backend publishes under: with the composite enabled, its members publish under
the composite's driver (pairs share counters with their members only in one driver's pool,
docs/composite.md). Call with (dict "root" $ "name" <backend>). */}}
{{- define "drakit.driverOf" -}}
{{- $v := .root.Values -}}
{{- $c := $v.backends.composite | default dict -}}
{{- if and $c.enabled (has .name ($c.members | default list)) -}}
{{- $c.driver -}}
{{- else -}}
{{- (index $v.backends .name).driver -}}
{{- end -}}
{{- end -}}

{{/* "true" when another enabled backend publishes under the same driver as .name. */}}
{{- define "drakit.sharesDriver" -}}
{{- $mine := include "drakit.driverOf" . -}}
{{- $shared := false -}}
{{- range $other := include "drakit.enabled" .root | fromJsonArray -}}
{{- if and (ne $other $.name) (eq (include "drakit.driverOf" (dict "root" $.root "name" $other)) $mine) -}}
{{- $shared = true -}}
{{- end -}}
{{- end -}}
{{- $shared -}}
{{- end -}}

{{/* The driver names of the enabled backends, as a JSON list (each once). */}}
{{- define "drakit.drivers" -}}
{{- $drivers := list -}}
{{- range $name := include "drakit.enabled" . | fromJsonArray -}}
{{- $drivers = append $drivers (include "drakit.driverOf" (dict "root" $ "name" $name)) -}}
{{- end -}}
{{- toJson ($drivers | uniq) -}}
{{- end -}}

{{/* true when an enabled backend needs a privileged container. */}}
{{- define "drakit.privileged" -}}
{{- include "drakit.anyEnabled" (list . "privileged") -}}
{{- end -}}

{{/* "true" when an enabled backend sets the flag named by the second argument. */}}
{{- define "drakit.anyEnabled" -}}
{{- $root := index . 0 -}}
{{- $flag := index . 1 -}}
{{- $p := false -}}
{{- range $name := include "drakit.enabled" $root | fromJsonArray -}}
{{- if index (index $root.Values.backends $name) $flag -}}{{- $p = true -}}{{- end -}}
{{- end -}}
{{- $p -}}
{{- end -}}

{{/* drakit.yaml: `config`, then the enabled backends' sections in load order. */}}
{{- define "drakit.config" -}}
{{- with .Values.config }}{{ toYaml . }}{{ "\n" }}{{ end -}}
plugins:
{{- range $name := include "drakit.enabled" . | fromJsonArray }}
{{- $b := index $.Values.backends $name }}
  {{ $name }}:
    {{- $fixed := dict "driver" (include "drakit.driverOf" (dict "root" $ "name" $name)) }}
    {{- if eq $name "nvidia_gpu" }}
    {{- $fixed = merge $fixed (include "drakit.nvidiaDriverRoot" (dict "root" $ "b" $b) | fromYaml) }}
    {{- end }}
    {{- toYaml (merge $fixed ($b.config | default dict)) | nindent 4 }}
{{- end }}
{{- end -}}

{{/*
The NVIDIA backend's driver root: the host's backends.nvidia_gpu.driverRoot, mounted read-only at
/var/run/drakit/driver-root (daemonset.yaml; not with a simulated root, which holds it), and
where nvidia-ctk finds the host's dev/ (the device-root mount). Its keys in the backend's config
are the chart's: setting them there fails.
*/}}
{{- define "drakit.nvidiaDriverRoot" -}}
{{- $config := .b.config | default dict }}
{{- range $key := list "driver_root" "driver_root_seen" "toolkit_dev_root" }}
{{- if hasKey $config $key }}
{{- fail (printf "backends.nvidia_gpu.config.%s is set by the chart; set backends.nvidia_gpu.driverRoot (the host directory the driver is installed under) instead" $key) }}
{{- end }}
{{- end }}
driver_root: {{ .b.driverRoot | default "/" | quote }}
{{- if not .root.Values.simulatedRoot }}{{/* simulated: the driver root is in the simulated root */}}
driver_root_seen: /var/run/drakit/driver-root
{{- if .b.deviceNodes }}
toolkit_dev_root: /var/run/drakit/device-root
{{- end }}
{{- end }}
{{- end -}}

{{/* KUBERNETES_SERVICE_HOST/PORT overrides (values apiServer.host/port), if set. */}}
{{- define "drakit.apiServerEnv" -}}
{{- with .Values.apiServer.host }}
- {name: KUBERNETES_SERVICE_HOST, value: {{ . | quote }}}
{{- end }}
{{- with .Values.apiServer.port }}
- {name: KUBERNETES_SERVICE_PORT, value: {{ . | quote }}}
{{- end }}
{{- end -}}
