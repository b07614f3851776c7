{{/*
The alert rules: the single source of the PrometheusRule (prometheusrule.yaml) and of
the plain rules file deploy/prometheus/specfleet-alerts.yaml (rendered from this with
the default values; tests/test_alerts.py fails when it is stale). Every window and
pending period is a value, so tests can evaluate the rules at short intervals.

vLLM's series are grouped by (namespace, model): the PodMonitor (or the scrape config in
docs/alerts.md) copies the pod labels specfleet.io/model and specfleet.io/track to
`model` and `track`. Acceptance is judged on the stable track only (`track!="canary"`
also matches pods without the label): a canary's candidate K is an experiment the
operator aborts by itself.
*/}}
{{- define "specfleet.alertGroups" -}}
{{- $a := .Values.alerts -}}
{{- $figures := .Files.Get "files/alert-figures.yaml" | fromYaml -}}
{{- $runbook := $a.runbookBaseURL -}}
groups:
  - name: specfleet
    {{- with $a.evaluationInterval }}
    interval: {{ . }}
    {{- end }}
    rules:
      {{- with $a.acceptanceBelowFloor }}
      {{- if .enabled }}
      {{- $window := .window }}
      - alert: SpecfleetAcceptanceBelowFloor
        # Each model against its own floor, on the figure its floor judges (the operator
        # exports both: specfleet_acceptance_floor, specfleet_acceptance_metric): a branch
        # a rollback metric, each figure from the operator's table of them
        # (files/alert-figures.yaml), from vLLM's own counters but RelativeToBaseline's,
        # whose baseline only the operator knows (its gauge). With no operator series at
        # all (the operator is down) the spec's default metric against the chart's floor.
        expr: |-
          (
            {{- range $figures.metrics }}
            (
              {{- join "\n" .figure | replace "WINDOW" $window | nindent 14 }}
              < on (namespace, model) max by (namespace, model) (specfleet_acceptance_floor)
              and on (namespace, model) max by (namespace, model) (specfleet_acceptance_metric{metric="{{ .metric }}"}) == 1
            )
            or
            {{- end }}
            (
              {{- join "\n" $figures.withoutOperator | replace "WINDOW" $window | nindent 14 }}
              < {{ .floor }}
              unless on (namespace, model) specfleet_acceptance_floor
            )
          )
          and on (namespace, model)
          {{ $figures.draftsPerSecond | replace "WINDOW" $window }} > {{ .minDraftsPerSecond }}
        for: {{ .for }}
        labels:
          severity: {{ .severity }}
          {{- with $a.labels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ `{{ $labels.namespace }}/{{ $labels.model }} acceptance is below its floor` | quote }}
          description: {{ printf "The figure the floor of %s judges (its spec.rollback.metric, over %s, stable pods; first-position acceptance when the operator exports nothing) is %s, under its spec.rollback.minAcceptance (%v when the operator exports nothing). Below the floor the operator keeps the fastest K while speculation still pays (condition AcceptanceBelowFloor) and switches to plain decoding when it does not; if this keeps firing, the draft no longer matches the traffic (retrain or replace it), or the operator is down." `{{ $labels.namespace }}/{{ $labels.model }}` .window `{{ $value | humanizePercentage }}` .floor | quote }}
          runbook_url: {{ printf "%s#specfleetacceptancebelowfloor" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $a.rollback }}
      {{- if .enabled }}
      - alert: SpecfleetRollback
        # increase() misses a counter's first increment (the series appears at 1), so a
        # series that exists now but did not one window ago counts too.
        expr: |-
          sum by (namespace, model, reason) (increase(specfleet_rollbacks_total[{{ .window }}])) > 0
          or
          sum by (namespace, model, reason) (specfleet_rollbacks_total unless specfleet_rollbacks_total offset {{ .window }}) > 0
        labels:
          severity: {{ .severity }}
          {{- with $a.labels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ `{{ $labels.namespace }}/{{ $labels.model }} was rolled back ({{ $labels.reason }})` | quote }}
          description: {{ printf "The operator rolled %s back within the last %s, reason %s: acceptance fell under spec.rollback.minAcceptance for spec.rollback.failureLimit windows in a row. The decision, with the acceptance it saw, is in status.history and in the object's Events." `{{ $labels.namespace }}/{{ $labels.model }}` .window `{{ $labels.reason }}` | quote }}
          runbook_url: {{ printf "%s#specfleetrollback" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $a.speculationInactive }}
      {{- if .enabled }}
      - alert: SpecfleetSpeculationInactive
        # Serving tokens, and either the operator reports speculation off, or vLLM
        # drafts nothing (the second part works without the operator).
        expr: |-
          {{ $figures.generationTokensPerSecond | replace "WINDOW" .window }} > 0
          and on (namespace, model)
          (
            max by (namespace, model) (specfleet_speculation_active) == 0
            or
            (
              {{ $figures.generationTokensPerSecond | replace "WINDOW" .window }}
              unless on (namespace, model)
              {{ $figures.draftsPerSecond | replace "WINDOW" .window }} > 0
            )
          )
          # Plain decoding the operator chose because it measured faster is as intended.
          unless on (namespace, model)
          max by (namespace, model) (specfleet_plain_decoding_chosen) == 1
        for: {{ .for }}
        labels:
          severity: {{ .severity }}
          {{- with $a.labels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ `{{ $labels.namespace }}/{{ $labels.model }} serves requests without speculative decoding` | quote }}
          description: {{ printf "%s generated tokens over the last %s but speculation is not active: the operator switched it off (status.speculation.off says why), the pods are not drafting, or the draft failed its preflight. Requests are served at plain decoding speed." `{{ $labels.namespace }}/{{ $labels.model }}` .window | quote }}
          runbook_url: {{ printf "%s#specfleetspeculationinactive" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $a.tunerFlapping }}
      {{- if .enabled }}
      - alert: SpecfleetTunerFlapping
        expr: |-
          max by (namespace, model) (changes(specfleet_speculative_tokens{track="stable"}[{{ .window }}])) > {{ .maxChanges }}
        labels:
          severity: {{ .severity }}
          {{- with $a.labels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ `{{ $labels.namespace }}/{{ $labels.model }}: the tuner keeps changing K` | quote }}
          description: {{ printf "The stable K of %s changed %s times in the last %s (more than %v). Each change is a rollout of every stable pod; the tuner is flapping between candidates whose goodput or acceptance it cannot tell apart." `{{ $labels.namespace }}/{{ $labels.model }}` `{{ $value }}` .window .maxChanges | quote }}
          runbook_url: {{ printf "%s#specfleettunerflapping" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $a.metricsUnavailable }}
      {{- if .enabled }}
      - alert: SpecfleetMetricsUnavailable
        expr: |-
          max by (namespace, model) (specfleet_metrics_available) == 0
        for: {{ .for }}
        labels:
          severity: {{ .severity }}
          {{- with $a.labels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ `{{ $labels.namespace }}/{{ $labels.model }}: the operator cannot measure acceptance` | quote }}
          description: {{ printf "The operator has had too many inconclusive metrics windows in a row for %s (MetricsAvailable=False): pods unreachable, no traffic, or too few draft tokens per window. It neither tunes K nor rolls back while this lasts." `{{ $labels.namespace }}/{{ $labels.model }}` | quote }}
          runbook_url: {{ printf "%s#specfleetmetricsunavailable" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $a.configRejected }}
      {{- if .enabled }}
      - alert: SpecfleetConfigRejected
        expr: |-
          max by (namespace, model) (specfleet_config_rejected) == 1
        labels:
          severity: {{ .severity }}
          {{- with $a.labels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: {{ `{{ $labels.namespace }}/{{ $labels.model }}: a new config was rejected; the stable pods run the last good one` | quote }}
          description: {{ printf "The config in the spec of %s (its draft model, method, runtime image or args) lost its trial against the running config: its goodput gain fell short of spec.rollout.minGain, its acceptance fell below the floor, or it timed out. The stable pods keep the last good config; the spec is not what runs. The condition ConfigRejected has the measured numbers and the config hash; commit a new config, revert the spec, or force this one with the annotation specfleet.io/force-config." `{{ $labels.namespace }}/{{ $labels.model }}` | quote }}
          runbook_url: {{ printf "%s#specfleetconfigrejected" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $a.operatorDown }}
      {{- if .enabled }}
      - alert: SpecfleetOperatorDown
        # Down (every target of the job failing its scrape) or gone (no target at all).
        expr: |-
          max by (job) (up{job={{ $a.operatorJob | quote }}}) == 0
          or
          absent(up{job={{ $a.operatorJob | quote }}})
        for: {{ .for }}
        labels:
          severity: {{ .severity }}
          {{- with $a.labels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: "The specfleet operator is down"
          description: {{ printf "No target of the scrape job %s has been up for %s. Inference pods keep serving with the K they have, but nothing tunes K or rolls back on low acceptance until the operator is back." $a.operatorJob .for | quote }}
          runbook_url: {{ printf "%s#specfleetoperatordown" $runbook }}
      {{- end }}
      {{- end }}
      {{- with $a.noLeader }}
      {{- if .enabled }}
      - alert: SpecfleetNoLeader
        # Replicas up but none holding the Lease (or none exporting the gauge at all).
        expr: |-
          max by (job) (specfleet_leader{job={{ $a.operatorJob | quote }}}) < 1
          or
          absent(specfleet_leader{job={{ $a.operatorJob | quote }}})
        for: {{ .for }}
        labels:
          severity: {{ .severity }}
          {{- with $a.labels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: "No specfleet operator replica leads"
          description: {{ printf "No replica of the scrape job %s has held the leader Lease for %s. Inference pods keep serving with the K they have, but nothing tunes K or rolls back on low acceptance until one does: check the replicas' logs for Lease errors (RBAC on leases, the API server)." $a.operatorJob .for | quote }}
          runbook_url: {{ printf "%s#specfleetnoleader" $runbook }}
      {{- end }}
      {{- end }}
{{- end -}}
