#!/usr/bin/env bash
# Kubeflow: give one profile namespace's notebook pods, through Workload Identity, access to
# that namespace's folder of the bucket only (a managed folder), matching
# GKERESUME_STORE=gs://BUCKET/kf/NAMESPACE in deploy/kubeflow/poddefault.yaml.
#
# The grant is to the namespace's principal set (every Kubernetes service account in it): v1
# Notebook pods run as default-editor, v2 Workspace pods as ws-{workspace name}, one account per
# Workspace, created when the Workspace is. One binding serves both, and every Workspace to come.
# The namespace is the trust unit already (its contributors can read its Secrets, the key).
#
#   deploy/gcs/grant-namespace.sh PROJECT_ID BUCKET NAMESPACE
set -euo pipefail
project=$1 bucket=$2 namespace=$3
number=$(gcloud projects describe "$project" --format='value(projectNumber)')
pool="projects/$number/locations/global/workloadIdentityPools/$project.svc.id.goog"
member="principalSet://iam.googleapis.com/$pool/namespace/$namespace"

gcloud storage managed-folders create "gs://$bucket/kf/$namespace/" 2>/dev/null || true  # exists
gcloud storage managed-folders add-iam-policy-binding "gs://$bucket/kf/$namespace/" \
  --member="$member" --role=roles/storage.objectUser
