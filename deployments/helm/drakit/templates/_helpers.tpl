{{- define "drakit.name" -}}drakit{{- end -}}
{{- define "drakit.labels" -}}
app.kubernetes.io/name: drakit
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}
{{- define "drakit.sa" -}}{{ .Release.Name }}-drakit{{- end -}}
