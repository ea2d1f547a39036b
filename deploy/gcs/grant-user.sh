#!/usr/bin/env bash
# JupyterHub (z2jh): give one user a Kubernetes service account and that account, through
# Workload Identity, access to that user's folder of the bucket only (a managed folder).
# deploy/z2jh/values.yaml runs each user's pod as gkeresume-{username} with
# GKERESUME_STORE=gs://BUCKET/hub/{username}; USERNAME is KubeSpawner's safe slug of the Hub user
# (the same as the name for lowercase letters, digits and '-').
#
#   deploy/gcs/grant-user.sh PROJECT_ID BUCKET HUB_NAMESPACE USERNAME
set -euo pipefail
project=$1 bucket=$2 namespace=$3 user=$4
number=$(gcloud projects describe "$project" --format='value(projectNumber)')
pool="principal://iam.googleapis.com/projects/$number/locations/global/workloadIdentityPools"
member="$pool/$project.svc.id.goog/subject/ns/$namespace/sa/gkeresume-$user"

kubectl -n "$namespace" create serviceaccount "gkeresume-$user" --dry-run=client -o yaml \
  | kubectl apply -f -
gcloud storage managed-folders create "gs://$bucket/hub/$user/" 2>/dev/null || true  # exists
gcloud storage managed-folders add-iam-policy-binding "gs://$bucket/hub/$user/" \
  --member="$member" --role=roles/storage.objectUser
