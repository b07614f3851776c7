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
# Exactly the verbs the operator's code calls (e2e/test_rbac_audit.py compares them with
# the API server's audit log). SpeculativeModels: the operator's input, read-only. Spec
# belongs to Git; the tuned K lives in status and in the child Deployments.
- apiGroups: [specfleet.io]
  resources: [speculativemodels]
  verbs:
    # list, watch: kopf's listing and event stream, and the operator's own listing after
    # a watch was away (a relist sends no DELETED); without them it sees no model at all.
    - list
    - watch
    # get: the model as it now is when a status write conflicts (the write is retried
    # against it) and before creating a child after a watch gap or re-creating a deleted
    # one (a model gone is never written to again).
    - get
# Status: conditions, K in effect, acceptance windows, decision history.
- apiGroups: [specfleet.io]
  resources: [speculativemodels/status]
  verbs:
    # update: every status write (a PUT of the status subresource, which keeps all but
    # status as it is); without it no condition, no tuned K and no rollback is recorded.
    - update
# The stable and canary Deployments of each model.
- apiGroups: [apps]
  resources: [deployments]
  verbs:
    # list, watch: the rollout state (ready replicas) for the Ready and Progressing
    # conditions; without them the operator never reports Ready.
    - list
    - watch
    # get: who owns an object with a child's name when a create-only apply finds the
    # name taken, or the watch saw it as another's; without it such a model never says
    # which object is in its way.
    - get
    # create, patch: server-side apply (an apply may create); a new K is a new pod
    # template. No delete: the canary is scaled to 0, and owner references let the
    # garbage collector delete children with their model.
    - create
    - patch
# The LeaderWorkerSets of models whose replicas span nodes (runtime.parallelism
# nodesPerReplica above 1), in place of the Deployments; LeaderWorkerSet's own controller
# makes their pods. Where its CRD is not installed, they are neither watched nor listed.
- apiGroups: [leaderworkerset.x-k8s.io]
  resources: [leaderworkersets]
  verbs:
    # list, watch: the groups' rollout state (ready replicas), as for the Deployments.
    - list
    - watch
    # get: who owns an object with a child's name when a create-only apply finds the
    # name taken.
    - get
    # create, patch: server-side apply (an apply may create); a new K is a new leader
    # and worker template. No delete (garbage collector).
    - create
    - patch
# The Service of each model (selects both tracks).
- apiGroups: [""]
  resources: [services]
  verbs:
    # list, watch: the model's Service, put back when deleted or edited by hand.
    - list
    - watch
    # get: who owns an object with a child's name when a create-only apply finds the
    # name taken, or the watch saw it as another's; without it such a model never says
    # which object is in its way.
    - get
    # create, patch: server-side apply of the model's Service (an apply may create);
    # without them clients have no stable address. No delete (garbage collector).
    - create
    - patch
# The PodDisruptionBudget of each model's stable pods.
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs:
    # list, watch: the model's budget, put back when deleted or edited by hand.
    - list
    - watch
    # get: who owns an object with a child's name when a create-only apply finds the
    # name taken, or the watch saw it as another's.
    - get
    # create, patch: server-side apply of the budget (an apply may create); without
    # them a node drain may evict every replica at once. No delete (garbage collector).
    - create
    - patch
# The inference pods: read-only.
- apiGroups: [""]
  resources: [pods]
  verbs:
    # list, watch: pod readiness, pod IPs to scrape /metrics from, and the termination
    # message of a failed preflight. Without them there are no acceptance metrics, so no
    # tuning and no rollback.
    - list
    - watch
# The ReplicaSets of the model's Deployments: read-only.
- apiGroups: [apps]
  resources: [replicasets]
  verbs:
    # list, watch: which pods the model's Deployments made (pod -> ReplicaSet ->
    # Deployment -> model). Without them no pod is the model's: none is scraped, and a
    # pod anyone labels as the model's would otherwise be read as one of its own.
    - list
    - watch
# core/v1 Events: the operator reports each decision (promote, rollback, ...) and each
# runtime failure as a new Event (never patched: each post creates one).
- apiGroups: [""]
  resources: [events]
  verbs:
    # create: without it those Events are lost (the operator logs each failed post).
    - create
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

{{/* A Prometheus duration ("1m30s", the schema's pattern) in milliseconds. */}}
{{- define "specfleet.durationMs" -}}
{{- $units := dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 "d" 86400000 "w" 604800000 "y" 31536000000 -}}
{{- $total := 0 -}}
{{- range regexFindAll "[0-9]+(ms|s|m|h|d|w|y)" . -1 -}}
{{- $number := regexFind "^[0-9]+" . -}}
{{- $total = add $total (mul (int64 $number) (get $units (trimPrefix $number .))) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/* Fails when a monitor's scrapeTimeout exceeds its interval, which Prometheus refuses
(the monitor's scrape config is dropped). Takes the values' key and the monitor's values. */}}
{{- define "specfleet.scrapeTimeoutFits" -}}
{{- $key := index . 0 -}}
{{- $monitor := index . 1 -}}
{{- if gt (int64 (include "specfleet.durationMs" $monitor.scrapeTimeout)) (int64 (include "specfleet.durationMs" $monitor.interval)) -}}
{{- fail (printf "%s.scrapeTimeout (%s) must not exceed %s.interval (%s): Prometheus refuses a scrape longer than its interval" $key $monitor.scrapeTimeout $key $monitor.interval) -}}
{{- end -}}
{{- end -}}
