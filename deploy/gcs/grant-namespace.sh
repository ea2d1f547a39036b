#!/usr/bin/env bash
# Kubeflow: give one profile namespace's notebook pods (service account default-editor), through
# Workload Identity, access to that namespace's folder of the bucket only (a managed folder),
# matching GKERESUME_STORE=gs://BUCKET/kf/NAMESPACE in deploy/kubeflow/poddefault.yaml.
#
#   deploy/gcs/grant-namespace.sh PROJECT_ID BUCKET NAMESPACE
set -euo pipefail
project=$1 bucket=$2 namespace=$3
number=$(gcloud projects describe "$project" --format='value(projectNumber)')
pool="principal://iam.googleapis.com/projects/$number/locations/global/workloadIdentityPools"
member="$pool/$project.svc.id.goog/subject/ns/$namespace/sa/default-editor"

gcloud storage managed-folders create "gs://$bucket/kf/$namespace/" 2>/dev/null || true  # exists
gcloud storage managed-folders add-iam-policy-binding "gs://$bucket/kf/$namespace/" \
  --member="$member" --role=roles/storage.objectUser
