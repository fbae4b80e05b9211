{{/*
Name of the chart, overridable with nameOverride.
*/}}
{{- define "distgnn.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name: release-chart, unless the release name already contains the chart
name; overridable with fullnameOverride. Truncated to 63 characters (DNS label limit).
*/}}
{{- define "distgnn.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart label value: name-version.
*/}}
{{- define "distgnn.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Standard labels (https://kubernetes.io/docs/concepts/overview/working-with-objects/common-labels/).
*/}}
{{- define "distgnn.labels" -}}
helm.sh/chart: {{ include "distgnn.chart" . }}
{{ include "distgnn.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: distgnn
{{- end }}

{{/*
Selector labels: stable for the release's lifetime (a Deployment's selector is immutable).
*/}}
{{- define "distgnn.selectorLabels" -}}
app.kubernetes.io/name: {{ include "distgnn.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
Name of the operator's ServiceAccount.
*/}}
{{- define "distgnn.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "distgnn.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Operator image reference; the tag defaults to the chart's appVersion.
*/}}
{{- define "distgnn.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
Default runtime image for jobs (DISTGNN_RUNTIME_IMAGE); the tag defaults to appVersion.
*/}}
{{- define "distgnn.runtimeImage" -}}
{{- printf "%s:%s" .Values.runtimeImage.repository (default .Chart.AppVersion .Values.runtimeImage.tag) }}
{{- end }}

{{/*
Namespaces the operator watches: the release namespace is never implied; an empty list means
all namespaces (cluster-wide RBAC).
*/}}
{{- define "distgnn.clusterWide" -}}
{{- if .Values.watchNamespaces }}false{{ else }}true{{ end }}
{{- end }}

{{/*
Name of the kopf peering object (HA): one per release so two releases never pause each other.
*/}}
{{- define "distgnn.peeringName" -}}
{{- default (include "distgnn.fullname" .) .Values.ha.peeringName }}
{{- end }}

{{/*
Operator replica count: 1, or ha.replicas when ha.enabled.
*/}}
{{- define "distgnn.replicas" -}}
{{- if .Values.ha.enabled }}{{ .Values.ha.replicas }}{{ else }}1{{ end }}
{{- end }}

{{/*
RBAC rules the operator needs in every namespace it watches (in a ClusterRole when it watches
all namespaces, in a Role per namespace otherwise).
*/}}
{{- define "distgnn.namespacedRules" -}}
# The custom resources: kopf lists and watches them and patches its finalizer and progress
# annotations; the operator reads one by name and deletes a DistGNNJob past its TTL.
- apiGroups: ["distgnn.dev"]
  resources: ["distgnnjobs"]
  verbs: ["get", "list", "watch", "patch", "delete"]
- apiGroups: ["distgnn.dev"]
  resources: ["graphservers"]
  verbs: ["get", "list", "watch", "patch"]
# Phase, conditions and metrics (merge patches of the status subresource).
- apiGroups: ["distgnn.dev"]
  resources: ["distgnnjobs/status", "graphservers/status"]
  verbs: ["patch"]
# Every child's ownerReference has blockOwnerDeletion: true; where the
# OwnerReferencesPermissionEnforcement admission plugin runs (OpenShift, hardened clusters)
# only a user who may update the owner's finalizers may set it, else every create is refused.
- apiGroups: ["distgnn.dev"]
  resources: ["distgnnjobs/finalizers", "graphservers/finalizers"]
  verbs: ["update"]
# Pods: list a Job's pods (termination messages, rank 0's address for progress) and
# delete a restarted trainer group's pods. Pods are not watched.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "delete"]
# Children the operator applies (observe by label, create, patch drift, prune): headless
# Services and the servers' StatefulSets and NetworkPolicies. kopf watches these and the
# Jobs (label-selected), so a deleted child comes back at once. "get" on every child kind: when
# a create finds the name taken, the operator reads who controls the object there and
# reports somebody else's in the resource's status (reason ResourceExists).
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["apps"]
  resources: ["statefulsets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# The per-job token Secret NAME-token: created once, never patched, read by name (its
# token's hash goes on the servers' pod template; a job's storage.credentialsSecret that
# does not exist is reported in its status). No list or watch: RBAC cannot narrow those to
# the operator's own Secrets, and nothing needs them (a deleted token Secret is recreated
# by the next pass).
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create", "delete"]
# Children created once and never patched: the partitioner and trainer Jobs (immutable
# templates: recreated on restart).
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "delete"]
# kopf and the operator post Kubernetes events (core/v1); the operator lists the
# FailedCreate events of a StatefulSet or Job that has been short of pods (field selector
# involvedObject.uid): read-only, no watch, no update.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "list"]
{{- if .Values.gangScheduling.enabled }}
# Gang scheduling: one PodGroup per job (scheduler-plugins coscheduling), created once.
- apiGroups: ["scheduling.x-k8s.io"]
  resources: ["podgroups"]
  verbs: ["get", "list", "create", "delete"]
{{- end }}
{{- if .Values.kueue.enabled }}
# Kueue: one Workload per queued job (created, watched; GC deletes it with the job; delete:
# the API server's OwnerReferencesPermissionEnforcement asks it of whoever sets an
# ownerReference, and the operator deletes one no longer matching its job's spec before
# admission; patch: spec.active follows the job's suspend), whose status the operator
# patches when it released the quota of an evicted job, the partitioning pod's quota is
# reclaimable, or the job ended.
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads/status"]
  verbs: ["patch"]
{{- end }}
{{- end }}
