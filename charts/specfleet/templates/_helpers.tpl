{{/* The chart's name, truncated to a DNS label. */}}
{{- define "specfleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name: the release name, plus the chart's unless it contains it. */}}
{{- define "specfleet.fullname" -}}
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

{{- define "specfleet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "specfleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "specfleet.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "specfleet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: specfleet
{{- end -}}

{{- define "specfleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "specfleet.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "specfleet.image" -}}
{{- $repository := .Values.image.repository -}}
{{- with (.Values.global).imageRegistry -}}
{{- /* The first path part is a registry when it names a host (a dot, a port, localhost). */ -}}
{{- $parts := splitn "/" 2 $repository -}}
{{- if and $parts._1 (or (contains "." $parts._0) (contains ":" $parts._0) (eq $parts._0 "localhost")) -}}
{{- $repository = printf "%s/%s" . $parts._1 -}}
{{- else -}}
{{- $repository = printf "%s/%s" . $repository -}}
{{- end -}}
{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
The operator's permissions, the same rules for the ClusterRole (cluster-wide watching)
and for each namespace's Role. Each verb says what breaks without it. Deliberately
absent: Secrets (inference pods get the Hugging Face token through secretKeyRef, which
the kubelet resolves; the operator never reads it), delete on anything (child objects
carry owner references to their SpeculativeModel, so the garbage collector deletes
them), create/update/delete of SpeculativeModels (they belong to the user or to Git),
and every kind not listed here.
*/}}
{{- define "specfleet.rbacRules" -}}
# SpeculativeModels: the operator's input, read-only. Spec belongs to Git; the tuned K
# lives in status and in the child Deployments. No get, create, update, patch or delete.
- apiGroups: [specfleet.io]
  resources: [speculativemodels]
  verbs:
    # list, watch: kopf's initial listing and event stream; without them the operator
    # sees no SpeculativeModel at all.
    - list
    - watch
# Status: conditions, K in effect, acceptance windows, decision history.
- apiGroups: [specfleet.io]
  resources: [speculativemodels/status]
  verbs:
    # patch: every status write (merge patch through the status subresource); without
    # it no condition, no tuned K and no rollback is ever recorded.
    - patch
# The stable and canary Deployments of each model.
- apiGroups: [apps]
  resources: [deployments]
  verbs:
    # get, list, watch: read the children's rollout state (ready replicas) for the
    # Ready/Progressing conditions; without them the operator never reports Ready.
    - get
    - list
    - watch
    # create, patch: server-side apply of the stable and canary Deployments (a new K
    # is a new pod template). Without them no pod is ever started or re-rolled.
    # No delete: the canary is scaled to 0, and owner references let the garbage
    # collector delete children with their SpeculativeModel.
    - create
    - patch
# The Service of each model (selects both tracks).
- apiGroups: [""]
  resources: [services]
  verbs:
    # get, list, watch: observe the Service the operator owns.
    - get
    - list
    - watch
    # create, patch: server-side apply of the model's Service; without them clients
    # have no stable address. No delete (garbage collector).
    - create
    - patch
# The inference pods: read-only.
- apiGroups: [""]
  resources: [pods]
  verbs:
    # get, list, watch: pod readiness, pod IPs to scrape /metrics from, and the
    # termination message of a failed preflight. Without them there are no acceptance
    # metrics, so no tuning and no rollback.
    - get
    - list
    - watch
# Events (core v1 and events.k8s.io/v1): the operator reports each decision (promote,
# rollback, ...) and each runtime failure as an Event.
- apiGroups: [""]
  resources: [events]
  verbs:
    # create: without it those Events are lost (the operator logs each failed post).
    - create
    # patch: a repeated event updates the existing Event's count instead of piling up
    # new objects; without it repeats fail like a missing create.
    - patch
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs:
    # create: as above, for clients that post through the events.k8s.io/v1 API.
    - create
    # patch: as above (series updates of a repeated event).
    - patch
{{- end -}}

{{/* The `--namespace`/`--all-namespaces` arguments from watch.namespaces. */}}
{{- define "specfleet.watchArgs" -}}
{{- if .Values.watch.namespaces }}
{{- range .Values.watch.namespaces }}
- --namespace
- {{ . | quote }}
{{- end }}
{{- else }}
- --all-namespaces
{{- end }}
{{- end -}}
